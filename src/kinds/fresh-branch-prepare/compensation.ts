/**
 * Undo of `fresh_branch_prepare`: the worktree, its branch, the
 * environment-repo row and the worktree's resource marker.
 *
 * 1. From the step's `present_exact` evidence (worktree path) and request,
 *    inspect Git outside any transaction.
 * 2. Nothing there (no path, registration or branch; e.g. a re-run after a
 *    crash) -> only the rows are left: go to 4.
 * 3. Untouched (registered on the branch, HEAD = branch = base commit,
 *    clean including untracked and ignored files, marker file byte-equal to
 *    this operation/step's) -> `git worktree remove` (no --force) and delete
 *    the branch by compare-and-set on the base commit; re-inspect: it must
 *    now be nothing-there, else `retry_wait`. Anything else (modified,
 *    committed, foreign marker, half-registered) -> no Git change: the rows
 *    and the complete Git proof transfer to a cleanup job
 *    (`worktree_touched`), which quarantines or removes it later.
 * 4. One Store transaction deletes the environment-repo and marker rows
 *    while they are still exactly the step's (else transfer) and records
 *    `compensated`.
 * Git that cannot answer (timeout, lock contention) -> `retry_wait`.
 */
import type { FreshBranchPrepareRequest } from '../../canonical/types';
import { readRows } from '../../db/tx';
import { markerFileText } from './step';
import { expectedEnvironmentRepo, expectedMarker } from './ledger';
import type { OwnedRow } from '../../store/effects/compensate-owned-rows';
import { rowHash } from '../../store/effects/row-documents';
import type { CompensationClaim } from '../../store/types';
import {
  deleteBranchAt,
  gitMessage,
  inspectWorktree,
  isUntouched,
  nothingThere,
  removeUntouchedWorktree,
  seenDoc,
  type WorktreeSeen,
} from './git-worktree';
import {
  ownerOfClaim,
  recordPlain,
  settleRows,
  successObservation,
  transferRows,
  type RowsUndo,
} from '../../compensation/record';
import type { CompensationUndo } from '../contract';

export function freshBranchOwnedRows(claim: CompensationClaim, worktreePath: string): OwnedRow[] {
  const req = claim.request as FreshBranchPrepareRequest;
  const owner = ownerOfClaim(claim);
  return [
    {
      table: 'task_environment_repos',
      key: req.task_environment_repo_id,
      row_sha256: rowHash(expectedEnvironmentRepo(req, owner, worktreePath)),
      undone_sha256: null,
    },
    {
      table: 'task_resource_markers',
      key: req.resource_key,
      row_sha256: rowHash(expectedMarker(req, owner)),
      undone_sha256: null,
    },
  ];
}

function describe(s: WorktreeSeen): string {
  const what: string[] = [];
  if (!s.registered) what.push('not registered');
  if (s.clean === false) what.push('modified or untracked files');
  if (s.head !== null && s.head !== s.branchAt) what.push('HEAD is not the branch');
  if (s.markerText === null) what.push('no marker file');
  return what.length > 0 ? what.join(', ') : 'HEAD, branch or marker differ from the step';
}

export const undoFreshBranchPrepare: CompensationUndo = async (deps, claim) => {
  const req = claim.request as FreshBranchPrepareRequest;
  const obs = successObservation(claim);
  if (obs === null || typeof obs.worktree_path !== 'string') {
    return recordPlain(deps, claim, 'unknown', 'the step has no present_exact evidence naming its worktree');
  }
  const path = obs.worktree_path;
  const marker = markerFileText(req, ownerOfClaim(claim));
  const [repo] = await readRows<{ path: string }>(
    deps.db,
    'SELECT path FROM repositories WHERE id = ? AND workspace_id = ?',
    [req.repository_id, req.workspace_id],
  );
  const spec = (seen: WorktreeSeen | null): RowsUndo => ({
    rows: freshBranchOwnedRows(claim, path),
    detail: {
      repository_path: repo?.path ?? null,
      worktree_path: path,
      branch: req.branch,
      base_commit: req.base_commit,
      marker_file_text: marker,
      observed: seen === null ? null : seenDoc(seen),
    },
  });
  if (!repo) return transferRows(deps, claim, spec(null), 'repository_missing', 'the repository row is gone');
  let seen: WorktreeSeen | null = null;
  let touched: string | null = null;
  let retry: string | null = null;
  try {
    seen = await inspectWorktree(repo.path, path, req.branch, deps.timeoutMs);
    if (!seen.pathExists && !seen.registered && seen.branchAt === req.base_commit) {
      // An earlier undo removed the worktree and died before deleting the branch: what is left is this
      // step's branch still at the base commit, with nothing on it; delete it by compare-and-set.
      await deleteBranchAt(repo.path, req.branch, req.base_commit, deps.timeoutMs);
      seen = await inspectWorktree(repo.path, path, req.branch, deps.timeoutMs);
      if (!nothingThere(seen)) retry = 'branch still present after deleting it';
    } else if (!nothingThere(seen) && !isUntouched(seen, req.branch, req.base_commit, marker)) {
      touched = describe(seen);
    } else if (!nothingThere(seen)) {
      await removeUntouchedWorktree(repo.path, path, req.branch, req.base_commit, deps.timeoutMs);
      seen = await inspectWorktree(repo.path, path, req.branch, deps.timeoutMs);
      if (!nothingThere(seen)) retry = 'worktree or branch still present after removal';
    }
  } catch (err) {
    deps.log.warn({ step_id: claim.stepId, err: gitMessage(err) }, 'worktree undo could not finish; will retry');
    retry = `git: ${gitMessage(err)}`;
  }
  if (retry !== null) return recordPlain(deps, claim, 'retry_wait', retry);
  if (touched !== null) return transferRows(deps, claim, spec(seen), 'worktree_touched', `worktree kept: ${touched}`);
  return settleRows(deps, claim, spec(seen));
};
