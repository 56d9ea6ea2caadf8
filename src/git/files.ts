/**
 * What the files Git keeps prove on their own, without starting a Git
 * process: the hot path of a new worktree reads them instead of asking Git,
 * and asks Git whenever they do not prove the answer (ADR 0037). I/O only:
 * never call inside a SQL transaction.
 *
 * Contract: every answer is either proven from the files or "ask Git"
 * (null / false), never a guess.
 * - `filesRepository(dir)`: the common directory of a non-bare repository
 *   whose top level is `dir` and whose refs are files (`<dir>/.git` is a
 *   directory, not a linked worktree's `.git` file; `refs/heads` is a
 *   directory and there is no `reftable/`), owned by this process's user as
 *   Git's own ownership check requires; null for anything else (bare,
 *   reftable, a sub-directory, another owner, not a repository).
 * - `refsAreFiles(common)`: that common directory's refs are files and
 *   belong to this process's user (the part of `filesRepository` a linked
 *   worktree's common directory needs).
 * - `fileRef(common, ref)`: a loose ref file's full object ID (`{ oid }`); `'absent'`
 *   only when there is no loose file and `packed-refs` (if any) does not
 *   name the ref; null when the files do not prove either (a symbolic ref, a
 *   packed ref, a name clash with a directory or file, an unreadable file).
 * - `hasLooseObject(common, oid)`: true proves the object is there; false
 *   means "ask Git" (it may be packed).
 * - `looseCommit(common, oid)`: true only when the loose object is there and
 *   its header says `commit`; false means "ask Git".
 * - `branchCommitFromFiles(repo, name)`: what `git rev-parse --verify
 *   <name>^{commit}` answers for a plain branch name, when the files prove
 *   it: no `<git dir>/<name>`, `refs/<name>` or `refs/tags/<name>` (the
 *   names Git tries before `refs/heads/<name>`), the branch a loose ref to a
 *   loose commit; null for anything else (an abbreviation-like or revision
 *   expression, a tag, a packed or symbolic ref, a packed commit).
 * - `ownedByMe(path)`: the path exists and belongs to this process's
 *   effective user (where Git's `safe.directory` check lets Git answer).
 * Loose refs and objects are written to a temporary file and renamed by Git,
 * so a read sees a whole value or none. The reads are synchronous system
 * calls (src/git/small-reads.ts, ADR 0040).
 */
import { join } from 'node:path';
import { inflateSync, constants as zlib } from 'node:zlib';
import { lstatCode, lstatOrNull, readHead, readTextOrCode, statOrNull } from './small-reads';

const OID = /^([0-9a-f]{40}|[0-9a-f]{64})\n?$/;

/** This process's effective user, or null where the platform has none (then no path is "mine"). */
const myUid = (): number | null => (typeof process.geteuid === 'function' ? process.geteuid() : null);

export function ownedByMe(path: string): boolean {
  const uid = myUid();
  if (uid === null) return false;
  // What the path resolves to, as Git checks the canonical directories it discovered.
  const s = statOrNull(path);
  return s !== null && s.uid === uid;
}

const isDirectory = (p: string): boolean => lstatOrNull(p)?.isDirectory() ?? false;
const isMissing = (p: string): boolean => lstatCode(p) === 'ENOENT';

export function refsAreFiles(common: string): boolean {
  return isDirectory(join(common, 'refs', 'heads')) && isMissing(join(common, 'reftable')) && ownedByMe(common);
}

export function filesRepository(dir: string): string | null {
  const common = join(dir, '.git');
  const repository =
    isDirectory(common) && isMissing(join(common, 'commondir')) && ownedByMe(dir) && refsAreFiles(common);
  return repository ? common : null;
}

export function fileRef(common: string, ref: string): { oid: string } | 'absent' | null {
  if (!ref.startsWith('refs/') || ref.split('/').some((part) => part === '' || part === '.' || part === '..')) {
    return null;
  }
  const loose = readTextOrCode(join(common, ref));
  if ('code' in loose) {
    if (loose.code !== 'ENOENT') return null;
    const packed = readTextOrCode(join(common, 'packed-refs'));
    if ('code' in packed) return packed.code === 'ENOENT' ? 'absent' : null;
    return `${packed.text}\n`.includes(` ${ref}\n`) ? null : 'absent';
  }
  const oid = OID.exec(loose.text)?.[1];
  return oid === undefined ? null : { oid };
}

export function hasLooseObject(common: string, oid: string): boolean {
  if (!OID.test(oid)) return false;
  const s = statOrNull(join(common, 'objects', oid.slice(0, 2), oid.slice(2)));
  return s !== null && s.isFile() && s.size > 0;
}

export function looseCommit(common: string, oid: string): boolean {
  if (!OID.test(oid)) return false;
  const compressed = readHead(join(common, 'objects', oid.slice(0, 2), oid.slice(2)), 64);
  if (compressed === null) return false;
  let head: Buffer;
  try {
    head = inflateSync(compressed, { finishFlush: zlib.Z_SYNC_FLUSH });
  } catch {
    return false;
  }
  return head.subarray(0, 7).toString('latin1') === 'commit ';
}

/** A branch name with no revision syntax, and not one Git could also read as an abbreviated object ID. */
const PLAIN_BRANCH = /^(?!.*\.\.)(?!.*\/\.)(?!.*\.lock$)(?!.*\/$)[A-Za-z0-9_][A-Za-z0-9._/-]*$/;

export function branchCommitFromFiles(repo: string, name: string): string | null {
  if (!PLAIN_BRANCH.test(name) || /^[0-9a-f]{4,}$/i.test(name) || name === 'HEAD') return null;
  const common = filesRepository(repo);
  if (common === null) return null;
  const gitDirEntry = isMissing(join(common, name));
  const refsEntry = fileRef(common, `refs/${name}`);
  const tag = fileRef(common, `refs/tags/${name}`);
  const branch = fileRef(common, `refs/heads/${name}`);
  if (!gitDirEntry || refsEntry !== 'absent' || tag !== 'absent' || branch === null || branch === 'absent') return null;
  return looseCommit(common, branch.oid) ? branch.oid : null;
}
