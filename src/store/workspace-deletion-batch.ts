/**
 * One step of the workspace deletion cascade: the next creation of the
 * workspace, handled atomically in one transaction (the spec's workspace
 * deletion transaction, bounded to one creation so that deleting a workspace
 * with thousands of tasks never holds one transaction for long; ADR 0009).
 *
 * Locks, in global order: the workspace 1 FOR UPDATE (exclusive: no other
 * transaction of the workspace runs meanwhile, so the reads below are
 * exact); the deletion 4; the creation operation and, when it is being
 * released, its release 4.2 (ascending ID; the guard re-derives the
 * operation's bindings); the external-ID key 5.1, task 5.2, identity 6, steps 7; then
 * cleanup jobs 8.1, dispatch claims 8.2, environments 11.1 and the outbox 16
 * as each case needs. Per the creation's state:
 * - `completed` with a task not deleted: `deleteTaskLocked` — its effects to
 *   cleanup jobs, its dispatch claims cancelled or transferred, an armed
 *   launch intent never dispatched `cancelled` (`workspace_deleted`), the
 *   tombstone, revision N and one `task.deleted`;
 * - `completing` (Complete between its phases): the Complete predicate
 *   re-checked on the stored rows, the effects as above, then
 *   `completeTaskCreationLocked` (revision one, `task.created`) and the
 *   tombstone at revision two with its `task.deleted`, the two events in
 *   that order;
 * - `preparing` or `preparing-release` with nothing in flight (no step or
 *   compensation `running|unknown`): the workspace-delete Abort — every
 *   succeeded effect not yet undone transferred to a cleanup job (its
 *   compensation `transferred` with the job and the proof), an armed intent
 *   `cancelled`, the partial live rows deleted, identity and operation
 *   `aborted` (`workspace_deleted`), no event; a release in progress ends
 *   `completed` (the ID is free: its holder is gone);
 * - something in flight: nothing is written; the creation waits for the
 *   reaper's recovery to settle it (`waiting`).
 * The deletion's counts grow in the same transaction. No I/O.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../canonical/canonical-json';
import { compensationProofHash, evidenceHash } from '../canonical/hash';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import { completeTaskCreationLocked } from './complete';
import { verifyCompletePredicate } from './complete-verify';
import { compensationProofOf } from './compensation';
import { guardOperationLocked, lockTaskChainLocked, type GuardedOperation, type TaskLockRow } from './operation-guard';
import { lockStepsLocked } from './step-rows';
import {
  cancelledIntentEvidence,
  deleteTaskEffectsLocked,
  deleteTaskLocked,
  insertCleanupJobLocked,
  tombstoneTaskLocked,
  type DeletionContext,
  type DeletionJobBuilder,
} from './task-delete-locked';
import type { CompensationClaim, StepRow } from './types';
import { lockDeletionLocked, lockWorkspaceExclusiveLocked, pendingCreationsLocked } from './workspace-deletion';

export type CascadeOutcome = 'deleted' | 'completed_and_deleted' | 'aborted' | 'waiting';

export interface CascadeStep {
  operationId: string;
  outcome: CascadeOutcome;
}

interface Counts {
  completed: number;
  aborted: number;
  deleted: number;
  cancelled: number;
  transferred: number;
  jobs: number;
}

const IN_FLIGHT = new Set(['running', 'unknown']);

function inFlight(steps: StepRow[]): boolean {
  return steps.some((s) => IN_FLIGHT.has(s.state) || IN_FLIGHT.has(s.compensation_state));
}

/** Completing: the stored predicate re-checked (phase A proved the rows), Complete's finalizer, the tombstone. */
async function finishAndDeleteLocked(
  tx: Tx,
  g: GuardedOperation,
  task: TaskLockRow,
  steps: StepRow[],
  ctx: DeletionContext,
  counts: Counts,
): Promise<void> {
  verifyCompletePredicate(steps, g.plan);
  const effects = await deleteTaskEffectsLocked(tx, { op: g.op, plan: g.plan, task, steps }, ctx);
  // Two events at tier 16, in ascending key order: the smaller ID is task.created (revision one).
  const [createdId, deletedId] = [randomUUID(), randomUUID()].sort();
  await completeTaskCreationLocked(tx, { op: g.op, plan: g.plan, task, resolves: false }, createdId);
  await tombstoneTaskLocked(tx, { op: g.op, task, revision: 2, eventId: deletedId! }, ctx);
  counts.completed++;
  counts.deleted++;
  counts.cancelled += effects.cancelledLaunches;
  counts.transferred += effects.transferredLaunches;
  counts.jobs += effects.cleanupJobIds.length;
}

/** Workspace-delete Abort: every effect transferred, an armed intent cancelled, the partial rows gone, no event. */
async function abortForDeletionLocked(
  tx: Tx,
  g: GuardedOperation,
  task: TaskLockRow | undefined,
  steps: StepRow[],
  ctx: DeletionContext,
  counts: Counts,
): Promise<void> {
  const { op, plan } = g;
  const specs = task ? await ctx.jobs(tx, { op, plan, task, steps, dispatches: [], reason: ctx.reason }) : [];
  const jobs = specs.map((spec) => ({ id: randomUUID(), spec })).sort((a, b) => (a.id < b.id ? -1 : 1));
  for (const j of jobs) {
    tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', j.id);
    await insertCleanupJobLocked(tx, { id: j.id, op, spec: j.spec, reason: ctx.reason });
    const step = steps.find((s) => s.id === j.spec.stepId)!;
    const claimLike = { kind: step.kind, stepKey: step.step_key, requestSha256: step.request_sha256 };
    const owned = (j.spec.proof.owned_rows ?? []) as { table: string; key: string; row_sha256: string }[];
    const proof = compensationProofOf(
      claimLike as CompensationClaim,
      'transferred',
      j.id,
      `${ctx.reason}: the effect was handed to its cleanup job`,
      owned.map((r) => ({ table: r.table, key: r.key, row_sha256: r.row_sha256 })),
    );
    // Steps 7 are held: the compensation generation fences any undo still holding an older claim.
    await tx.exec(
      `UPDATE task_creation_steps SET compensation_state = 'transferred', cleanup_job_id = ?,
              compensation_generation = compensation_generation + 1, compensation_lease_owner = NULL,
              compensation_lease_expires_at = NULL, compensation_evidence_json = ?, compensation_evidence_sha256 = ?,
              updated_at = ${tx.now}
        WHERE id = ?`,
      [j.id, canonicalJson(proof), compensationProofHash(proof), step.id],
    );
  }
  for (const s of steps.filter((x) => x.kind === 'launch_intent' && x.state === 'armed')) {
    const evidence = cancelledIntentEvidence(s);
    await tx.exec(
      `UPDATE task_creation_steps SET state = 'cancelled', disposition = 'workspace_deleted', generation = generation + 1,
              evidence_json = ?, evidence_sha256 = ?, updated_at = ${tx.now}
        WHERE id = ? AND state = 'armed'`,
      [canonicalJson(evidence), evidenceHash(evidence), s.id],
    );
    counts.cancelled++;
  }
  const envs = await tx.rows<{ id: string }>(
    'SELECT id FROM task_environments WHERE task_id = ? AND operation_id = ? ORDER BY id',
    [op.task_id, op.id],
  );
  for (const e of envs) tx.lockRow(TIER.ENVIRONMENT, 'task_environments', e.id);
  await tx.exec('DELETE FROM task_environments WHERE task_id = ? AND operation_id = ?', [op.task_id, op.id]);
  await tx.exec('DELETE FROM task_repositories WHERE task_id = ?', [op.task_id]);
  await tx.exec('DELETE FROM tasks WHERE id = ? AND creation_operation_id = ?', [op.task_id, op.id]);
  await tx.exec(
    `UPDATE task_identities SET state = 'aborted', updated_at = ${tx.now} WHERE task_id = ? AND operation_id = ?`,
    [op.task_id, op.id],
  );
  await tx.exec(
    `UPDATE task_creation_operations SET state = 'aborted', abort_cause = 'workspace_deleted', aborted_at = ${tx.now},
            updated_at = ${tx.now}
      WHERE id = ? AND state IN ('preparing', 'preparing-release')`,
    [op.id],
  );
  counts.aborted++;
  counts.jobs += jobs.length;
}

const emptyCounts = (): Counts => ({ completed: 0, aborted: 0, deleted: 0, cancelled: 0, transferred: 0, jobs: 0 });

async function cascadeOnceLocked(
  tx: Tx,
  deletionId: string,
  after: string | null,
  jobs: DeletionJobBuilder,
): Promise<CascadeStep | 'none'> {
  const peek = await tx.one<{ workspace_id: string }>('SELECT workspace_id FROM workspace_deletions WHERE id = ?', [
    deletionId,
  ]);
  if (!peek) return 'none';
  if ((await lockWorkspaceExclusiveLocked(tx, peek.workspace_id)) !== 'deleting') return 'none';
  const [operationId] = await pendingCreationsLocked(tx, peek.workspace_id, { after, limit: 1 });
  if (operationId === undefined) return 'none';
  const deletion = await lockDeletionLocked(tx, deletionId);
  if (!deletion || deletion.state !== 'running') return 'none';
  // A release in progress (preparing-release) ends with the creation: its row and the creation's are operation
  // rows of tier 4.2, locked in ascending ID order (Tx.lockOperationRow).
  const release = await tx.one<{ release_operation_id: string | null }>(
    "SELECT release_operation_id FROM task_creation_operations WHERE id = ? AND state = 'preparing-release'",
    [operationId],
  );
  const releaseId = release?.release_operation_id ?? null;
  const lockRelease = async () => {
    tx.lockOperationRow('external_id_releases', releaseId!);
    await tx.rows('SELECT id FROM external_id_releases WHERE id = ? FOR UPDATE', [releaseId]);
  };
  if (releaseId !== null && releaseId < operationId) await lockRelease();
  const g = await guardOperationLocked(
    tx,
    { kind: 'operation', operationId, actor: `workspace-deletion:${deletionId}` },
    // The external-ID read goes ahead of the task chain only when no release row comes between them.
    releaseId !== null && releaseId > operationId ? undefined : { externalIdKey: true, steps: true, ownTaskOnly: true },
  );
  if (releaseId !== null && releaseId > operationId) await lockRelease();
  const { task } = await lockTaskChainLocked(tx, g.op, {
    externalIdKey: true,
    externalIdAbsent: g.externalIdAbsent,
    steps: true,
  });
  const steps = await lockStepsLocked(tx, g.op.id);
  const ctx: DeletionContext = { deletionId, reason: 'workspace_deleted', jobs, cancelArmedIntents: true };
  const counts = emptyCounts();
  let outcome: CascadeOutcome;
  if (g.op.state === 'completed') {
    if (!task || task.lifecycle_state === 'deleted') return { operationId, outcome: 'deleted' };
    const r = await deleteTaskLocked(tx, { op: g.op, plan: g.plan, task, steps }, ctx);
    counts.deleted++;
    counts.cancelled += r.cancelledLaunches;
    counts.transferred += r.transferredLaunches;
    counts.jobs += r.cleanupJobIds.length;
    outcome = 'deleted';
  } else if (g.op.state === 'completing') {
    if (!task) return { operationId, outcome: 'waiting' };
    await finishAndDeleteLocked(tx, g, task, steps, ctx, counts);
    outcome = 'completed_and_deleted';
  } else {
    if (inFlight(steps)) return { operationId, outcome: 'waiting' };
    await abortForDeletionLocked(tx, g, task, steps, ctx, counts);
    if (releaseId !== null) {
      await tx.exec(
        `UPDATE external_id_releases SET state = 'completed', completed_at = ${tx.now}, updated_at = ${tx.now}
          WHERE id = ? AND state = 'running'`,
        [releaseId],
      );
    }
    outcome = 'aborted';
  }
  await tx.exec(
    `UPDATE workspace_deletions SET completed_creations = completed_creations + ?, aborted_creations = aborted_creations + ?,
            deleted_tasks = deleted_tasks + ?, cancelled_launches = cancelled_launches + ?,
            transferred_launches = transferred_launches + ?, cleanup_jobs = cleanup_jobs + ?, batches = batches + 1,
            updated_at = ${tx.now}
      WHERE id = ?`,
    [counts.completed, counts.aborted, counts.deleted, counts.cancelled, counts.transferred, counts.jobs, deletionId],
  );
  return { operationId, outcome };
}

/**
 * Handles the workspace's next pending creation after `after` (ascending ID),
 * or answers `none` when there is none left after it (or the deletion is not
 * running).
 */
export async function cascadeNextCreation(
  db: Db,
  deletionId: string,
  options: { after: string | null; jobs: DeletionJobBuilder },
): Promise<CascadeStep | 'none'> {
  return runTransaction(db, 'WorkspaceDeletion.Cascade', (tx) =>
    cascadeOnceLocked(tx, deletionId, options.after, options.jobs),
  );
}
