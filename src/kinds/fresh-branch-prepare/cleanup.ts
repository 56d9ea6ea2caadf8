/**
 * Cleanup of a transferred `fresh_branch_prepare` effect, from its proof
 * (`repository_path`, `worktree_path`, `branch`, `base_commit`,
 * `marker_file_text`). Git runs outside any transaction.
 *
 * - Nothing at the path, no registration, no branch (already cleaned, or a
 *   re-run after a crash) -> rows only.
 * - Registered at the path with the exact marker file: untouched -> removed
 *   (`git worktree remove` without --force, branch deleted by
 *   compare-and-set on the base commit); touched -> quarantined: the
 *   worktree moves to `<dataDir>/quarantine/<workspace>/<job>/<name>` and
 *   the branch is renamed `taskledger-quarantine/<job>` (every change kept).
 *   Then the rows.
 * - Anything else (marker missing or different, path not registered, only
 *   the branch left without a marker to prove it ours, repository gone) ->
 *   `unknown`, nothing touched.
 * Git that cannot answer -> `retry`.
 */
import { basename, join } from 'node:path';
import { isGitRepository } from '../../git/cli';
import type { EffectDeps } from '../contract';
import type { CleanupJobClaim } from '../../store/cleanup-jobs';
import type { CleanupProof } from '../../compensation/cleanup-proof';
import {
  gitMessage,
  inspectWorktree,
  isUntouched,
  nothingThere,
  quarantineWorktree,
  removeUntouchedWorktree,
} from './git-worktree';
import { retryDecision, rowsDecision, unknownDecision, type CleanupDecision } from '../../cleanup/decision';

interface WorktreeDetail {
  repository_path: string | null;
  worktree_path: string;
  branch: string;
  base_commit: string;
  marker_file_text: string;
}

export function quarantinePaths(deps: EffectDeps, job: CleanupJobClaim, worktreePath: string) {
  return {
    path: join(deps.dataDir, 'quarantine', job.workspaceId, job.id, basename(worktreePath)),
    branch: `taskledger-quarantine/${job.id}`,
  };
}

export async function cleanWorktree(
  deps: EffectDeps,
  job: CleanupJobClaim,
  proof: CleanupProof,
): Promise<CleanupDecision> {
  const d = proof.detail as unknown as WorktreeDetail;
  if (typeof d.worktree_path !== 'string' || typeof d.branch !== 'string' || typeof d.marker_file_text !== 'string') {
    return unknownDecision('proof_invalid', 'the worktree proof lacks path, branch or marker');
  }
  if (d.repository_path === null || !(await isGitRepository(d.repository_path, deps.timeoutMs))) {
    return unknownDecision('repository_missing', 'the repository named by the proof is not a Git repository');
  }
  try {
    const seen = await inspectWorktree(d.repository_path, d.worktree_path, d.branch, deps.timeoutMs);
    if (nothingThere(seen)) return rowsDecision('worktree already gone');
    const ours = seen.registered && seen.pathExists && seen.markerText === d.marker_file_text;
    if (!ours) {
      return unknownDecision(
        'marker_mismatch',
        'the path or branch exists without the marker file the proof names; not touched',
      );
    }
    if (isUntouched(seen, d.branch, d.base_commit, d.marker_file_text)) {
      await removeUntouchedWorktree(d.repository_path, d.worktree_path, d.branch, d.base_commit, deps.timeoutMs);
      return rowsDecision('untouched worktree removed');
    }
    const q = quarantinePaths(deps, job, d.worktree_path);
    await quarantineWorktree(d.repository_path, d.worktree_path, d.branch, q.path, q.branch, deps.timeoutMs);
    return rowsDecision(`worktree quarantined at ${q.path}, branch ${q.branch}`);
  } catch (err) {
    return retryDecision('git_failed', gitMessage(err));
  }
}
