/**
 * Cleanup of a deleted task's effects (jobs whose reason is `task_deleted`
 * or `workspace_deleted`, src/lifecycle/deletion-jobs.ts): what a
 * compensation would restore is removed instead, since the task is gone.
 * I/O outside any transaction; the rows go in FinishCleanupJob's transaction,
 * each only while it still has the hash the proof recorded.
 *
 * - `launch_dispatch`: the executor on the agent's host fences the start
 *   marker and stops every process carrying the dispatch key, then proves
 *   none is left (src/launch/stop-agent.ts); a claim transferred while a
 *   worker held it is finished only once that worker's lease has run out.
 *   Another host, no executor, or no proof yet -> `retry`.
 * - `fresh_branch_prepare` and `session_prepare` wait until the task's
 *   `launch_dispatch` jobs are done (the agent runs in the worktree and owns
 *   the session) -> `retry` until then. The worktree is removed when Git
 *   registers it at the proof's path with the proof's marker file, touched
 *   or not (`worktree remove --force`, then the branch); gone already ->
 *   rows only; the path or branch without the marker -> `unknown`, untouched.
 * - `attachment_claim`: the task's copies and the staged files are deleted
 *   (gone already is fine), then the rows.
 * - `workspace_attachment`, `remote_contribution_associate`: as for a
 *   compensation transfer (rows; the marker comment deleted).
 */
import type { CleanupProof } from '../compensation/cleanup-proof';
import { removeFile } from '../kinds/attachment-claim/compensation';
import { gitMessage, inspectWorktree, nothingThere } from '../kinds/fresh-branch-prepare/git-worktree';
import { nowSql } from '../db/dialect';
import { readRows } from '../db/tx';
import type { Executor } from '../launch/executor';
import { isGitRepository, runGit } from '../git/cli';
import type { EffectDeps } from '../kinds/contract';
import { runtimeExists } from '../store/effects/row-documents';
import { txReader } from '../store/effects/row-locks';
import { runtimeLock } from '../kinds/session-prepare/compensation';
import type { CleanupJobClaim } from '../store/cleanup-jobs';
import { cleanAssociation } from '../kinds/remote-contribution-associate/cleanup';
import { elsewhereDecision, retryDecision, rowsDecision, unknownDecision, type CleanupDecision } from './decision';

export interface DeletionCleanupDeps extends EffectDeps {
  /** Stops agents (the launch workers' executor on this host); without it, `launch_dispatch` jobs wait. */
  executor?: Executor;
}

async function agentJobsOpen(deps: EffectDeps, taskId: string): Promise<number> {
  const rows = await readRows<{ n: number | string }>(
    deps.db,
    "SELECT COUNT(*) AS n FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch' AND state <> 'done'",
    [taskId],
  );
  return Number(rows[0]?.n ?? 0);
}

interface DispatchDetail {
  dispatch_id: string;
  session_id: string;
  idempotency_key: string;
  generation: number;
  host: string | null;
  lease_expires_at: string | null;
}

async function stopAgent(deps: DeletionCleanupDeps, proof: CleanupProof): Promise<CleanupDecision> {
  const d = proof.detail as unknown as DispatchDetail;
  if (typeof d.idempotency_key !== 'string' || typeof d.session_id !== 'string') {
    return unknownDecision('proof_invalid', 'the dispatch proof names no dispatch key or session');
  }
  if (!deps.executor) return retryDecision('no_executor', 'this cleanup worker has no executor to stop agents');
  if (d.host !== null && d.host !== deps.executor.host) {
    return elsewhereDecision('other_host', `the agent runs on ${d.host}; its cleanup worker stops it`);
  }
  const stopped = await deps.executor.stop({
    idempotencyKey: d.idempotency_key,
    sessionId: d.session_id,
    generation: Number(d.generation),
    ...(d.host === null ? { onlyIfStartedHere: true } : {}),
  });
  if (!stopped.stopped && stopped.elsewhere) {
    // No host recorded (a claim from before runtime handles named one) and no sign it ran here: absence on this
    // host proves nothing. The job waits (counted, backing off) for the worker of the host that has the marker;
    // its error_code says why for an operator.
    return retryDecision('host_unknown', `the ledger names no host for the agent, and ${stopped.reason}`);
  }
  if (!stopped.stopped) return retryDecision('agent_not_stopped', stopped.reason);
  // A worker may still hold the transferred claim until its lease runs out; only then can nothing start any more.
  // The claim row keeps the lease's last end (renewals included), compared on the database clock.
  const live = await readRows<{ lease_expires_at: string }>(
    deps.db,
    `SELECT lease_expires_at FROM task_launch_dispatch_claims WHERE id = ? AND lease_expires_at > ${nowSql(deps.db.dialect)}`,
    [d.dispatch_id],
  );
  if (live.length > 0) {
    return retryDecision(
      'claim_lease_live',
      `the transferred claim's lease runs until ${String(live[0]!.lease_expires_at)}`,
    );
  }
  return rowsDecision(`agent stopped (${stopped.signalled} process(es) signalled, marker ${stopped.marker})`);
}

interface WorktreeDetail {
  repository_path: string | null;
  worktree_path: string;
  branch: string;
  marker_file_text: string;
}

async function removeWorktree(deps: EffectDeps, proof: CleanupProof): Promise<CleanupDecision> {
  const d = proof.detail as unknown as WorktreeDetail;
  if (typeof d.worktree_path !== 'string' || typeof d.branch !== 'string') {
    return unknownDecision('proof_invalid', 'the worktree proof lacks path or branch');
  }
  if (d.repository_path === null || !(await isGitRepository(d.repository_path, deps.timeoutMs))) {
    return unknownDecision('repository_missing', 'the repository named by the proof is not a Git repository');
  }
  try {
    const seen = await inspectWorktree(d.repository_path, d.worktree_path, d.branch, deps.timeoutMs);
    if (nothingThere(seen)) return rowsDecision('worktree already gone');
    if (seen.pathExists || seen.registered) {
      if (!(seen.registered && seen.markerText === d.marker_file_text)) {
        return unknownDecision(
          'marker_mismatch',
          'the path exists without the marker file the proof names; not touched',
        );
      }
      await runGit(['-C', d.repository_path, 'worktree', 'remove', '--force', d.worktree_path], deps.timeoutMs);
    }
    // The branch was cut for this task (its name carries the task's identity): deleted with its commits.
    await runGit(['-C', d.repository_path, 'branch', '-D', d.branch], deps.timeoutMs).catch(async (err: unknown) => {
      const after = await inspectWorktree(d.repository_path!, d.worktree_path, d.branch, deps.timeoutMs);
      if (!nothingThere(after)) throw err;
    });
    const after = await inspectWorktree(d.repository_path, d.worktree_path, d.branch, deps.timeoutMs);
    if (!nothingThere(after)) return retryDecision('git_failed', 'worktree or branch still present after removal');
    return rowsDecision('worktree and branch removed');
  } catch (err) {
    return retryDecision('git_failed', gitMessage(err));
  }
}

async function removeAttachments(proof: CleanupProof): Promise<CleanupDecision> {
  const files = (proof.detail as { attachments?: { staged_path: string; claimed_path: string }[] }).attachments;
  if (!Array.isArray(files)) return unknownDecision('proof_invalid', 'the attachment proof lists no files');
  try {
    for (const f of files) {
      await removeFile(f.claimed_path);
      await removeFile(f.staged_path);
    }
    return rowsDecision('attachment files deleted');
  } catch (err) {
    return retryDecision('file_io_error', (err as Error).message.slice(0, 500));
  }
}

export async function decideDeletion(
  deps: DeletionCleanupDeps,
  job: CleanupJobClaim,
  proof: CleanupProof,
): Promise<CleanupDecision> {
  switch (proof.kind) {
    case 'launch_dispatch':
      return stopAgent(deps, proof);
    case 'fresh_branch_prepare':
    case 'session_prepare': {
      const open = await agentJobsOpen(deps, job.taskId);
      if (open > 0) return retryDecision('agent_running', `${open} agent stop job(s) of the task are not done yet`);
      if (proof.kind === 'fresh_branch_prepare') return removeWorktree(deps, proof);
      const sessionId = (proof.detail as { session_id?: unknown }).session_id;
      if (typeof sessionId !== 'string') return unknownDecision('proof_invalid', 'the session proof names no session');
      return {
        kind: 'rows',
        note: 'session rows',
        extraLocks: [runtimeLock(sessionId)],
        blocked: async (tx) =>
          (await runtimeExists(txReader(tx), sessionId)) ? 'a runtime exists for the session; stop it first' : null,
      };
    }
    case 'attachment_claim':
      return removeAttachments(proof);
    case 'remote_contribution_associate':
      return cleanAssociation(deps, proof);
    case 'workspace_attachment':
      return rowsDecision('operation-owned rows');
    case 'launch_intent':
      return unknownDecision('proof_invalid', 'launch intents have no effect to clean up');
  }
}
