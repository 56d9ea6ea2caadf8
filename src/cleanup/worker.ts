/**
 * The cleanup worker (`cleanup` fleet role): performs due cleanup jobs from
 * their canonical proof.
 *
 * `runDueCleanupJobs(deps, owner, {workspaceId?, limit?})`, one pass (what
 * the role's repeatable job and the tests call): for each due job
 * (FindDueCleanupJobs), ClaimCleanupJob (lease + generation), verify the
 * stored proof (schema envelope and `proof_sha256`), run the kind's
 * performer outside any transaction — worktree remove/quarantine with the
 * marker file still matching, marker comment deletion, staged attachment
 * restore; `workspace_attachment` and `session_prepare` are rows only; a
 * deleted task's effects are removed instead (src/cleanup/deleted-task.ts) —
 * and FinishCleanupJob: `done` undoes the proof's operation-owned rows in
 * the same transaction (only while each still matches the proof), `retry_wait`
 * tries again after the back-off, `unknown` leaves the job for an operator
 * with its reason (`error_code`); anything whose proof no longer matches is
 * never touched. A job another worker took, or whose lease this worker
 * lost, is skipped.
 */
import { cleanupProofHash } from '../canonical/hash';
import { isTaskLedgerError } from '../domain/errors';
import { claimCleanupJob, findDueCleanupJobs, finishCleanupJob, type CleanupJobClaim } from '../store/cleanup-jobs';
import { parseCleanupProof, type CleanupProof } from '../compensation/cleanup-proof';
import { unknownDecision, type CleanupDecision } from './decision';
import { kindModule } from '../kinds/registry';
import { decideDeletion, type DeletionCleanupDeps } from './deleted-task';
import { DELETION_REASONS } from '../lifecycle/deletion-jobs';

export interface CleanupRunReport {
  done: number;
  retry: number;
  unknown: number;
  /** Jobs whose run threw an unexpected error (logged; a later pass takes them again). */
  errors: number;
}

async function decide(deps: DeletionCleanupDeps, job: CleanupJobClaim, proof: CleanupProof): Promise<CleanupDecision> {
  // A deleted task's effects, and any agent handed to cleanup (a deletion's, or one found before Complete), are
  // removed rather than restored.
  if (DELETION_REASONS.has(job.reason) || proof.kind === 'launch_dispatch') return decideDeletion(deps, job, proof);
  const perform = kindModule(proof.kind).cleanup;
  if (perform === null) return unknownDecision('proof_invalid', `${proof.kind} is never transferred by compensation`);
  return perform(deps, job, proof);
}

function proofOf(job: CleanupJobClaim): CleanupProof | string {
  try {
    const proof = parseCleanupProof(job.proofJson);
    if (cleanupProofHash(proof) !== job.proofSha256) return 'proof_json does not hash to proof_sha256';
    const binds =
      proof.kind === job.kind &&
      proof.operation_id === job.operationId &&
      proof.step_id === job.stepId &&
      proof.task_id === job.taskId &&
      proof.workspace_id === job.workspaceId;
    return binds ? proof : 'the proof names another job, step or task';
  } catch (err) {
    return (err as Error).message.slice(0, 500);
  }
}

/** Performs one claimed job and finishes it; returns the state recorded, or null when the claim went stale. */
export async function performCleanupJob(deps: DeletionCleanupDeps, job: CleanupJobClaim) {
  const proof = proofOf(job);
  const decision = typeof proof === 'string' ? unknownDecision('proof_invalid', proof) : await decide(deps, job, proof);
  const log = deps.log.child({ cleanup_job_id: job.id, kind: job.kind, operation_id: job.operationId });
  try {
    const end =
      decision.kind === 'rows'
        ? await finishCleanupJob(deps.db, job, {
            state: 'done',
            rows: (proof as CleanupProof).owned_rows,
            ...(decision.extraLocks ? { extraLocks: decision.extraLocks } : {}),
            ...(decision.blocked ? { blocked: decision.blocked } : {}),
          })
        : await finishCleanupJob(deps.db, job, {
            state: decision.kind === 'retry' ? 'retry_wait' : 'unknown',
            errorCode: decision.code,
            message: decision.message,
            ...(decision.kind === 'retry' && decision.uncounted ? { uncounted: true } : {}),
          });
    if (end.state === 'unknown') log.warn({ error_code: end.errorCode }, 'cleanup job left for an operator');
    else log.info({ state: end.state }, 'cleanup job finished');
    return end.state;
  } catch (err) {
    if (isTaskLedgerError(err, 'stale_claim')) {
      log.warn('cleanup job claim went stale; nothing recorded');
      return null;
    }
    throw err;
  }
}

export async function runDueCleanupJobs(
  deps: DeletionCleanupDeps,
  owner: string,
  options: { workspaceId?: string; limit?: number } = {},
): Promise<CleanupRunReport> {
  const report: CleanupRunReport = { done: 0, retry: 0, unknown: 0, errors: 0 };
  for (const id of await findDueCleanupJobs(deps.db, options)) {
    let state;
    try {
      const job = await claimCleanupJob(deps.db, id, owner);
      if (job === null) continue;
      state = await performCleanupJob(deps, job);
    } catch (err) {
      // One job's unexpected failure must not stop the pass; its lease expires and a later pass takes it again.
      deps.log.error({ err, cleanup_job_id: id }, 'cleanup job failed unexpectedly; the pass goes on');
      report.errors++;
      continue;
    }
    if (state === 'done') report.done++;
    else if (state === 'retry_wait') report.retry++;
    else if (state === 'unknown') report.unknown++;
  }
  return report;
}
