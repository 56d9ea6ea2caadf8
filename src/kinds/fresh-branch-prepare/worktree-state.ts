/**
 * What Git and the file system say about one planned worktree: its path, its
 * registration, the branch, HEAD, the ownership marker file in the
 * worktree's own git directory, and (on request) whether the checkout is
 * clean. One inspection for the step (perform/observe), its compensation and
 * the cleanup worker. I/O only: never call inside a SQL transaction.
 *
 * `inspectWorktree` asks Git everything (`worktree list` reads every linked
 * worktree of the repository, so it grows with the repository); the hot path
 * of a step that has just made its worktree uses `inspectLinkedWorktree`,
 * which reads the same facts from that one worktree with one Git process.
 */
import { lstatSync } from 'node:fs';
import { readFile, realpath } from 'node:fs/promises';
import { readText, realpathOrNull } from '../../git/small-reads';
import { join, resolve } from 'node:path';
import {
  absoluteGitDir,
  branchCommit,
  currentBranch,
  GitCommandError,
  headCommit,
  listWorktrees,
  runGit,
} from '../../git/cli';
import { fileRef, ownedByMe, refsAreFiles } from '../../git/files';

/** The ownership marker, in the worktree's own git directory (the agent's checkout stays untouched). */
export const WORKTREE_MARKER_FILE = 'taskledger-owner.json';

export interface WorktreeState {
  pathExists: boolean;
  registered: boolean;
  /** Full ref of the registered worktree, e.g. `refs/heads/x`. */
  registeredBranch: string | null;
  /** The commit the planned branch points at, or null when it does not exist. */
  branchAt: string | null;
  head: string | null;
  checkedOut: string | null;
  gitDir: string | null;
  markerText: string | null;
  /** No modified, untracked or ignored file; null when not asked for or there is no live worktree. */
  clean: boolean | null;
}

export function pathExists(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** `status --porcelain --ignored --untracked-files=all` is empty. */
export async function isClean(path: string, timeoutMs: number): Promise<boolean> {
  const out = await runGit(['-C', path, 'status', '--porcelain', '--ignored', '--untracked-files=all'], timeoutMs);
  return out.trim() === '';
}

export async function inspectWorktree(
  repo: string,
  path: string,
  branch: string,
  timeoutMs: number,
  options: { clean?: boolean } = {},
): Promise<WorktreeState> {
  const exists = pathExists(path);
  const real = exists ? await realpath(path) : path;
  const entry = (await listWorktrees(repo, timeoutMs)).find((w) => w.path === path || w.path === real);
  const live = entry !== undefined && exists;
  const gitDir = live ? await absoluteGitDir(path, timeoutMs) : null;
  return {
    pathExists: exists,
    registered: entry !== undefined,
    registeredBranch: entry?.branch ?? null,
    branchAt: await branchCommit(repo, branch, timeoutMs),
    head: live ? await headCommit(path, timeoutMs) : null,
    checkedOut: live ? await currentBranch(path, timeoutMs) : null,
    gitDir,
    markerText: gitDir ? await readFile(join(gitDir, WORKTREE_MARKER_FILE), 'utf8').catch(() => null) : null,
    clean: live && options.clean === true ? await isClean(path, timeoutMs) : null,
  };
}

/** No path, no registration, no branch. */
export const nothingThere = (s: WorktreeState): boolean => !s.pathExists && !s.registered && s.branchAt === null;

/**
 * The same facts as `inspectWorktree` for a worktree expected at `path`, from the small files Git itself
 * keeps for it (`linkedFacts`: the `.git` file, the administrative directory's `commondir` and `HEAD`, the
 * loose branch ref) or, when those do not prove them (a packed or reftable ref, a detached HEAD, another
 * owner), from one `git rev-parse` in the worktree. Registered = the worktree's administrative directory
 * belongs to `repo`'s common directory and its `gitdir` file points back at `path` (what `worktree list`
 * reads); the registered branch is that directory's HEAD. Null when the worktree cannot be read either way
 * (no worktree there, the branch is missing, a foreign layout): the caller then inspects in full, which
 * also gives the evidence of what is there.
 */
export async function inspectLinkedWorktree(
  repo: string,
  path: string,
  branch: string,
  timeoutMs: number,
): Promise<WorktreeState | null> {
  const facts = linkedFactsFromFiles(path, branch) ?? (await linkedFactsFromGit(path, branch, timeoutMs));
  if (facts === null) return null;
  const { commonDir, gitDir, head, branchAt, checkedOut } = facts;
  const real = realpathOrNull;
  const [realRepo, realCommon, realGitDir, realPath] = [real(repo), real(commonDir), real(gitDir), real(path)];
  if (realRepo === null || realCommon === null || realGitDir === null || realPath === null) return null;
  const ownsRepo = realCommon === realRepo || realCommon === join(realRepo, '.git');
  const backLink = (readText(join(gitDir, 'gitdir')) ?? '').trim();
  const backTo = backLink === '' ? null : real(resolve(gitDir, backLink, '..'));
  const registered = ownsRepo && resolve(realGitDir, '..') === join(realCommon, 'worktrees') && backTo === realPath;
  if (!registered) return null;
  return {
    pathExists: true,
    registered,
    registeredBranch: checkedOut,
    branchAt,
    head,
    checkedOut,
    gitDir: realGitDir,
    markerText: readText(join(gitDir, WORKTREE_MARKER_FILE)),
    clean: null,
  };
}

/** What a linked worktree's own files and Git's answer alike: the directories, HEAD, the branch's commit. */
interface LinkedFacts {
  commonDir: string;
  gitDir: string;
  head: string;
  branchAt: string;
  /** Full ref HEAD names, or null when detached. */
  checkedOut: string | null;
}

/**
 * `path/.git` names the administrative directory; its `commondir` names the common directory; its `HEAD`
 * names the checked-out branch; the branch's loose ref file holds the commit both HEAD and the branch are
 * at (the files a `git rev-parse` there reads). Null unless every one of those files proves its fact.
 */
function linkedFactsFromFiles(path: string, branch: string): LinkedFacts | null {
  const text = readText(join(path, '.git'));
  const m = text === null ? null : /^gitdir: (.+)$/m.exec(text);
  if (!m || !ownedByMe(path)) return null;
  const gitDir = resolve(path, m[1]!.trim());
  const commondir = readText(join(gitDir, 'commondir'));
  const headText = readText(join(gitDir, 'HEAD'));
  const symref = headText === null ? null : /^ref: (refs\/heads\/\S+)\n?$/.exec(headText);
  if (commondir === null || commondir.trim() === '' || !symref) return null;
  const commonDir = resolve(gitDir, commondir.trim());
  if (!refsAreFiles(commonDir)) return null;
  const checkedOut = symref[1]!;
  const branchRef = `refs/heads/${branch}`;
  const branchAt = fileRef(commonDir, branchRef);
  const head = checkedOut === branchRef ? null : fileRef(commonDir, checkedOut);
  const headAt = checkedOut === branchRef ? branchAt : head;
  if (branchAt === null || branchAt === 'absent' || headAt === null || headAt === 'absent') return null;
  return { commonDir, gitDir, head: headAt.oid, branchAt: branchAt.oid, checkedOut };
}

/** The same facts from one `git rev-parse` in the worktree; null when Git cannot answer them there. */
async function linkedFactsFromGit(path: string, branch: string, timeoutMs: number): Promise<LinkedFacts | null> {
  let out: string;
  try {
    out = await runGit(
      [
        '-C',
        path,
        'rev-parse',
        '--path-format=absolute',
        '--git-common-dir',
        '--absolute-git-dir',
        'HEAD',
        `refs/heads/${branch}^{commit}`,
        '--symbolic-full-name',
        'HEAD',
      ],
      timeoutMs,
    );
  } catch (err) {
    if (err instanceof GitCommandError && !err.timedOut) return null;
    throw err;
  }
  const [commonDir, gitDir, head, branchAt, checkedOut] = out.trim().split('\n');
  if (!commonDir || !gitDir || !head || !branchAt || !checkedOut) return null;
  return { commonDir, gitDir, head, branchAt, checkedOut: checkedOut === 'HEAD' ? null : checkedOut };
}

/**
 * The administrative directory a linked worktree's `.git` file names (`gitdir: <dir>`), and the marker
 * file's text there: read from the file system, no Git process. Null when `path/.git` is not such a file.
 * What it says is proven afterwards by `inspectLinkedWorktree`.
 */
export function linkedGitDir(path: string): { gitDir: string; markerText: string | null } | null {
  const text = readText(join(path, '.git'));
  const m = text === null ? null : /^gitdir: (.+)$/m.exec(text);
  if (!m) return null;
  const gitDir = resolve(path, m[1]!.trim());
  return { gitDir, markerText: readText(join(gitDir, WORKTREE_MARKER_FILE)) };
}
