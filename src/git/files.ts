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
 * so a read sees a whole value or none.
 */
import { lstat, open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { inflateSync, constants as zlib } from 'node:zlib';

const OID = /^([0-9a-f]{40}|[0-9a-f]{64})\n?$/;

/** This process's effective user, or null where the platform has none (then no path is "mine"). */
const myUid = (): number | null => (typeof process.geteuid === 'function' ? process.geteuid() : null);

export async function ownedByMe(path: string): Promise<boolean> {
  const uid = myUid();
  if (uid === null) return false;
  // What the path resolves to, as Git checks the canonical directories it discovered.
  const s = await stat(path).catch(() => null);
  return s !== null && s.uid === uid;
}

const isDirectory = async (p: string): Promise<boolean> => (await lstat(p).catch(() => null))?.isDirectory() ?? false;
const isMissing = async (p: string): Promise<boolean> =>
  lstat(p).then(
    () => false,
    (err: NodeJS.ErrnoException) => err.code === 'ENOENT',
  );

export async function refsAreFiles(common: string): Promise<boolean> {
  const [heads, noReftable, mine] = await Promise.all([
    isDirectory(join(common, 'refs', 'heads')),
    isMissing(join(common, 'reftable')),
    ownedByMe(common),
  ]);
  return heads && noReftable && mine;
}

export async function filesRepository(dir: string): Promise<string | null> {
  const common = join(dir, '.git');
  const [gitDir, noCommondir, mine, files] = await Promise.all([
    isDirectory(common),
    isMissing(join(common, 'commondir')),
    ownedByMe(dir),
    refsAreFiles(common),
  ]);
  return gitDir && noCommondir && mine && files ? common : null;
}

export async function fileRef(common: string, ref: string): Promise<{ oid: string } | 'absent' | null> {
  if (!ref.startsWith('refs/') || ref.split('/').some((part) => part === '' || part === '.' || part === '..')) {
    return null;
  }
  let text: string;
  try {
    text = await readFile(join(common, ref), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return null;
    let packed: string;
    try {
      packed = await readFile(join(common, 'packed-refs'), 'utf8');
    } catch (e) {
      return (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'absent' : null;
    }
    return `${packed}\n`.includes(` ${ref}\n`) ? null : 'absent';
  }
  const oid = OID.exec(text)?.[1];
  return oid === undefined ? null : { oid };
}

export async function hasLooseObject(common: string, oid: string): Promise<boolean> {
  if (!OID.test(oid)) return false;
  const s = await stat(join(common, 'objects', oid.slice(0, 2), oid.slice(2))).catch(() => null);
  return s !== null && s.isFile() && s.size > 0;
}

export async function looseCommit(common: string, oid: string): Promise<boolean> {
  if (!OID.test(oid)) return false;
  let head: Buffer;
  try {
    const file = await open(join(common, 'objects', oid.slice(0, 2), oid.slice(2)), 'r');
    try {
      const buf = Buffer.alloc(64);
      const { bytesRead } = await file.read(buf, 0, 64, 0);
      head = inflateSync(buf.subarray(0, bytesRead), { finishFlush: zlib.Z_SYNC_FLUSH });
    } finally {
      await file.close();
    }
  } catch {
    return false;
  }
  return head.subarray(0, 7).toString('latin1') === 'commit ';
}

/** A branch name with no revision syntax, and not one Git could also read as an abbreviated object ID. */
const PLAIN_BRANCH = /^(?!.*\.\.)(?!.*\/\.)(?!.*\.lock$)(?!.*\/$)[A-Za-z0-9_][A-Za-z0-9._/-]*$/;

export async function branchCommitFromFiles(repo: string, name: string): Promise<string | null> {
  if (!PLAIN_BRANCH.test(name) || /^[0-9a-f]{4,}$/i.test(name) || name === 'HEAD') return null;
  const common = await filesRepository(repo);
  if (common === null) return null;
  const [gitDirEntry, refsEntry, tag, branch] = await Promise.all([
    isMissing(join(common, name)),
    fileRef(common, `refs/${name}`),
    fileRef(common, `refs/tags/${name}`),
    fileRef(common, `refs/heads/${name}`),
  ]);
  if (!gitDirEntry || refsEntry !== 'absent' || tag !== 'absent' || branch === null || branch === 'absent') return null;
  return (await looseCommit(common, branch.oid)) ? branch.oid : null;
}
