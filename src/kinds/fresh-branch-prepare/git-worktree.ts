/**
 * Git work for undoing `fresh_branch_prepare` (compensation and cleanup
 * jobs). I/O only: never call inside a SQL transaction.
 *
 * Contract:
 * - `inspectWorktree` reports the planned path, its registration, the
 *   branch, HEAD, the marker file in the worktree's own git directory and
 *   whether the checkout is clean (`status --porcelain --ignored
 *   --untracked-files=all` empty: no modified, untracked or ignored file).
 * - `isUntouched`: registered on the branch, HEAD and branch at the base
 *   commit, clean, and the marker file byte-equal to this step's.
 * - `removeUntouchedWorktree`: `git worktree remove` WITHOUT --force (Git
 *   itself refuses a checkout that became dirty meanwhile), then deletes
 *   the branch only while it still points at the base commit
 *   (`update-ref -d <ref> <base>`, a compare-and-set).
 * - `quarantineWorktree`: keeps every change: moves the worktree to the
 *   quarantine path (`git worktree move`) and renames the branch.
 */
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { rowHash } from '../../canonical/hash';
import { branchCommit, deleteBranchAt, GitCommandError, runGit } from '../../git/cli';
import { inspectWorktree as inspectState, nothingThere, pathExists, type WorktreeState } from './worktree-state';

export type WorktreeSeen = WorktreeState;
export { nothingThere };

/** The worktree as the undo needs it: everything, including whether the checkout is clean. */
export const inspectWorktree = (repo: string, path: string, branch: string, timeoutMs: number): Promise<WorktreeSeen> =>
  inspectState(repo, path, branch, timeoutMs, { clean: true });

export function isUntouched(s: WorktreeSeen, branch: string, base: string, markerText: string): boolean {
  const ref = `refs/heads/${branch}`;
  return (
    s.registered &&
    s.pathExists &&
    s.registeredBranch === ref &&
    s.checkedOut === ref &&
    s.head === base &&
    s.branchAt === base &&
    s.clean === true &&
    s.markerText === markerText
  );
}

/** What was seen, as a JSON document for a proof (the marker file by hash). */
export function seenDoc(s: WorktreeSeen) {
  return {
    path_exists: s.pathExists,
    registered: s.registered,
    registered_branch: s.registeredBranch,
    branch_commit: s.branchAt,
    head: s.head,
    checked_out: s.checkedOut,
    marker_file_sha256: s.markerText === null ? null : rowHash(s.markerText),
    clean: s.clean,
  };
}

export async function removeUntouchedWorktree(
  repo: string,
  path: string,
  branch: string,
  base: string,
  timeoutMs: number,
): Promise<void> {
  await runGit(['-C', repo, 'worktree', 'remove', path], timeoutMs);
  await deleteBranchAt(repo, branch, base, timeoutMs);
}

export { deleteBranchAt };

export async function quarantineWorktree(
  repo: string,
  path: string,
  branch: string,
  quarantinePath: string,
  quarantineBranch: string,
  timeoutMs: number,
): Promise<void> {
  await mkdir(dirname(quarantinePath), { recursive: true });
  if (pathExists(path)) await runGit(['-C', repo, 'worktree', 'move', path, quarantinePath], timeoutMs);
  if ((await branchCommit(repo, branch, timeoutMs)) !== null) {
    await runGit(['-C', repo, 'branch', '-m', branch, quarantineBranch], timeoutMs);
  }
}

export function gitMessage(err: unknown): string {
  if (err instanceof GitCommandError) return err.message.slice(0, 500);
  return (err instanceof Error ? err.message : String(err)).slice(0, 500);
}
