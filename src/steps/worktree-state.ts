/**
 * What Git and the file system say about one planned worktree: its path, its
 * registration, the branch, HEAD, the ownership marker file in the
 * worktree's own git directory, and (on request) whether the checkout is
 * clean. One inspection for the step (perform/observe), its compensation and
 * the cleanup worker. I/O only: never call inside a SQL transaction.
 */
import { lstat, readFile, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import { absoluteGitDir, branchCommit, currentBranch, headCommit, listWorktrees, runGit } from './git';

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

export async function pathExists(p: string): Promise<boolean> {
  try {
    await lstat(p);
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
  const exists = await pathExists(path);
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
