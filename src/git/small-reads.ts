/**
 * The few-byte files Git keeps (refs, `HEAD`, `commondir`, `gitdir`, the
 * marker file) and their metadata, read with one synchronous system call
 * each instead of through the thread pool (ADR 0040).
 *
 * Why synchronous: `fs.promises.readFile` of a 41-byte ref is four
 * thread-pool operations (open, fstat, read, close), each a hand-off to a
 * libuv thread and back with its promise; a Git-shape creation made ~30 of
 * them, and a CPU profile of a worker put ~14 % of its samples in them. Each
 * call here is a single `lstat`/`stat`/`realpath` or an open-read-close of
 * a local file of a few hundred bytes: microseconds, shorter than the
 * hand-offs it replaces. The event loop is blocked for that long only.
 * These are the files Git itself reads on every command in the same
 * repository, so a file system slow enough to matter would stall Git too.
 *
 * Contract: every function answers what its `fs.promises` counterpart
 * would, an error as its documented "nothing" (null / false) exactly where
 * the caller would have caught it:
 * - `readText(p)`: the file's UTF-8 text, null on any error;
 * - `readTextOrCode(p)`: the text, or the error's code (`ENOENT`, ...);
 * - `lstatOrNull(p)` / `statOrNull(p)`: the stats, null on any error;
 * - `lstatCode(p)`: null when the path is there (not followed), else the error's code;
 * - `realpathOrNull(p)`: `realpath(3)` (what `fs.promises.realpath` calls), null on any error;
 * - `readHead(p, n)`: the first `n` bytes, null on any error.
 */
import { closeSync, lstatSync, openSync, readFileSync, readSync, realpathSync, statSync, type Stats } from 'node:fs';

const codeOf = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN';

export function readText(p: string): string | null {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

export function readTextOrCode(p: string): { text: string } | { code: string } {
  try {
    return { text: readFileSync(p, 'utf8') };
  } catch (err) {
    return { code: codeOf(err) };
  }
}

export function lstatOrNull(p: string): Stats | null {
  try {
    return lstatSync(p, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null;
  }
}

export function lstatCode(p: string): string | null {
  try {
    lstatSync(p);
    return null;
  } catch (err) {
    return codeOf(err);
  }
}

export function statOrNull(p: string): Stats | null {
  try {
    return statSync(p, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null;
  }
}

export function realpathOrNull(p: string): string | null {
  try {
    return realpathSync.native(p);
  } catch {
    return null;
  }
}

export function readHead(p: string, n: number): Buffer | null {
  let fd: number;
  try {
    fd = openSync(p, 'r');
  } catch {
    return null;
  }
  try {
    const buf = Buffer.alloc(n);
    const bytesRead = readSync(fd, buf, 0, n, 0);
    return buf.subarray(0, bytesRead);
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}
