/**
 * The locked core of deleting a created task, shared by DeleteTask
 * (store/task-delete.ts) and the workspace deletion cascade
 * (store/workspace-deletion-batch.ts). It never begins a transaction and
 * takes only locks at or above the cleanup tier, in order.
 *
 * The caller holds: workspace 1, (the task's admission step 2), the
 * creation operation 4.2, the external-ID key 5.1, the task row 5.2 and
 * identity 6 (FOR UPDATE), and the operation's steps 7. The task is
 * `completed` and not deleted.
 *
 * `deleteTaskLocked` writes, in tier order (`deleteTaskEffectsLocked`, then
 * `tombstoneTaskLocked`; workspace deletion runs Complete's finalizer
 * between the two for a creation it finishes):
 * - cleanup jobs 8.1 (new rows, ascending ID): one per effect still in the
 *   world — each succeeded step's effect, and the agent of a dispatch that
 *   may have started one (`launch_dispatch`) — with the complete canonical
 *   proof the caller's `jobs` builder derives under these locks; the cleanup
 *   worker removes them (docs/adr/0009-task-lifecycle.md);
 * - dispatch claims 8.2 (FOR UPDATE, ascending ID), each fenced with this
 *   deletion's ID: `planned|retry_wait -> cancelled`, `running|unknown ->
 *   transferred` (its agent belongs to the `launch_dispatch` job),
 *   `succeeded` keeps its state (its runtime's job stops the agent);
 * - with `cancelArmedIntents` (workspace deletion only, the spec's sole
 *   `cancelled` transition): an armed launch intent 7 becomes `cancelled`,
 *   disposition `workspace_deleted`, `absent_proven` evidence;
 * - the task's operation-owned task environments 11.1 and task
 *   repositories (covered by the task row's lock) are deleted;
 * - the task row becomes the deleted task's tombstone: `lifecycle_state =
 *   'deleted'`, next revision, lifecycle generation + 1, no external ID (it
 *   is free again), no WIP slot or queue place, `deleted_at`,
 *   `deletion_operation_id`; the identity becomes `deleted`;
 * - revision N (`deleted`) and exactly one `task.deleted` event at revision
 *   N in the outbox 16.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../canonical/canonical-json';
import { cleanupProofHash, evidenceHash, payloadHash } from '../canonical/hash';
import type { CreationPlan, StepEvidence } from '../canonical/types';
import type { StepKind } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import type { Tx } from '../db/tx';
import type { OperationRow, TaskLockRow } from './operation-guard';
import type { StepRow } from './types';

export type DeletionReason = 'task_deleted' | 'workspace_deleted';

/** A dispatch claim as the deletion reads it (under the operation's lock, which every dispatch change takes). */
export interface DispatchRowForDeletion {
  id: string;
  session_id: string;
  state: string;
  generation: number;
  idempotency_key: string;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  runtime_handle: string | null;
  error_json: string | null;
}

export interface DeletionInput {
  op: OperationRow;
  plan: CreationPlan;
  task: TaskLockRow;
  steps: StepRow[];
  dispatches: DispatchRowForDeletion[];
  reason: DeletionReason;
}

/** One cleanup job to insert: the kind, the step it belongs to and its complete canonical proof. */
export interface CleanupJobSpec {
  kind: StepKind | 'launch_dispatch';
  stepId: string;
  proof: Record<string, unknown>;
}

/**
 * Builds the deletion's cleanup jobs from the locked rows (src/lifecycle/deletion-jobs.ts).
 * SQL reads on `tx` only; no I/O.
 */
export type DeletionJobBuilder = (tx: Tx, input: DeletionInput) => Promise<CleanupJobSpec[]>;

export interface DeletionContext {
  /** The task deletion's ID, or the workspace deletion's: recorded on the task, revision, event and claims. */
  deletionId: string;
  reason: DeletionReason;
  jobs: DeletionJobBuilder;
  /** Workspace deletion: armed launch intents become `cancelled` (`workspace_deleted`). */
  cancelArmedIntents: boolean;
}

export interface TaskDeletionOutcome {
  revision: number;
  eventId: string;
  cleanupJobIds: string[];
  cancelledLaunches: number;
  transferredLaunches: number;
}

const DISPATCH_COLUMNS =
  'id, session_id, state, generation, idempotency_key, lease_owner, lease_expires_at, runtime_handle, error_json';

/** Inserts one cleanup job (8.1; the caller registers its lock first, in ascending ID order). */
export async function insertCleanupJobLocked(
  tx: Tx,
  job: { id: string; op: Pick<OperationRow, 'id' | 'workspace_id' | 'task_id'>; spec: CleanupJobSpec; reason: string },
): Promise<void> {
  await tx.exec(
    `INSERT INTO task_resource_cleanup_jobs (id, workspace_id, task_id, operation_id, step_id, kind, reason, proof_json, proof_sha256, state, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ${tx.now}, ${tx.now})`,
    [
      job.id,
      job.op.workspace_id,
      job.op.task_id,
      job.op.id,
      job.spec.stepId,
      job.spec.kind,
      job.reason.slice(0, 64),
      canonicalJson(job.spec.proof),
      cleanupProofHash(job.spec.proof),
    ],
  );
}

/** The `absent_proven` evidence of a launch intent cancelled by workspace deletion (nothing was dispatched). */
export function cancelledIntentEvidence(step: StepRow): StepEvidence {
  return {
    version: 1,
    kind: 'launch_intent',
    step_key: step.step_key,
    request_sha256: step.request_sha256,
    observation: {
      reason: 'workspace_deleted: the armed intent was never dispatched',
      rows: [{ table: 'task_launch_dispatch_claims', key: step.step_key, row_sha256: null }],
    },
    observed_at: new Date().toISOString(),
    effect: 'absent_proven',
  };
}

/** Cleanup jobs 8.1, fenced dispatch claims 8.2, cancelled intents 7 (held), the task's environments 11.1. */
export async function deleteTaskEffectsLocked(
  tx: Tx,
  input: Omit<DeletionInput, 'dispatches' | 'reason'>,
  ctx: DeletionContext,
): Promise<Omit<TaskDeletionOutcome, 'revision' | 'eventId'>> {
  const { op } = input;
  const dispatches = (
    await tx.rows<DispatchRowForDeletion>(
      `SELECT ${DISPATCH_COLUMNS} FROM task_launch_dispatch_claims WHERE creation_operation_id = ? ORDER BY id`,
      [op.id],
    )
  ).map((d) => ({ ...d, generation: Number(d.generation) }));
  const specs = await ctx.jobs(tx, { ...input, dispatches, reason: ctx.reason });

  // 8.1: the cleanup jobs, new rows in ascending ID order.
  const jobs = specs.map((spec) => ({ id: randomUUID(), spec })).sort((a, b) => (a.id < b.id ? -1 : 1));
  for (const j of jobs) {
    tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', j.id);
    await insertCleanupJobLocked(tx, { id: j.id, op, spec: j.spec, reason: ctx.reason });
  }

  // 8.2: fence every dispatch claim with this deletion.
  let cancelledLaunches = 0;
  let transferredLaunches = 0;
  for (const d of dispatches) {
    tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', d.id);
    const to =
      d.state === 'planned' || d.state === 'retry_wait'
        ? 'cancelled'
        : d.state === 'running' || d.state === 'unknown'
          ? 'transferred'
          : d.state;
    if (to === 'cancelled') cancelledLaunches++;
    if (to === 'transferred') transferredLaunches++;
    // A transferred claim keeps its lease's end (as renewed up to this UPDATE, which waits for any renewal in
    // flight): its stop job finishes only once that time has passed on the database clock, when the fenced
    // worker can no longer start anything (src/cleanup/deleted-task.ts). Nothing renews it after this.
    await tx.exec(
      `UPDATE task_launch_dispatch_claims SET state = ?, deletion_operation_id = ?, lease_owner = NULL,
              lease_expires_at = CASE WHEN ? = 'transferred' THEN lease_expires_at ELSE NULL END, updated_at = ${tx.now}
        WHERE id = ? AND state = ?`,
      [to, ctx.deletionId, to, d.id, d.state],
    );
  }
  // 7 (already held): an armed intent never dispatched is cancelled by workspace deletion.
  if (ctx.cancelArmedIntents) {
    for (const s of input.steps.filter((x) => x.kind === 'launch_intent' && x.state === 'armed')) {
      if (dispatches.some((d) => d.session_id === s.step_key)) continue;
      const evidence = cancelledIntentEvidence(s);
      await tx.exec(
        `UPDATE task_creation_steps SET state = 'cancelled', disposition = 'workspace_deleted', generation = generation + 1,
                evidence_json = ?, evidence_sha256 = ?, updated_at = ${tx.now}
          WHERE id = ? AND state = 'armed'`,
        [canonicalJson(evidence), evidenceHash(evidence), s.id],
      );
      cancelledLaunches++;
    }
  }

  // 11.1: the task's own environments (Begin inserted them), then its repositories (under the task row's lock).
  const envs = await tx.rows<{ id: string }>(
    "SELECT id FROM task_environments WHERE task_id = ? AND kind = 'task' ORDER BY id",
    [op.task_id],
  );
  for (const e of envs) tx.lockRow(TIER.ENVIRONMENT, 'task_environments', e.id);
  if (envs.length > 0) await tx.exec("DELETE FROM task_environments WHERE task_id = ? AND kind = 'task'", [op.task_id]);
  await tx.exec('DELETE FROM task_repositories WHERE task_id = ?', [op.task_id]);
  return { cleanupJobIds: jobs.map((j) => j.id), cancelledLaunches, transferredLaunches };
}

/** The tombstone (task 5.2 and identity 6, held), revision `revision` and its `task.deleted` event 16. */
export async function tombstoneTaskLocked(
  tx: Tx,
  input: { op: OperationRow; task: TaskLockRow; revision: number; eventId: string },
  ctx: Pick<DeletionContext, 'deletionId' | 'reason'>,
): Promise<void> {
  const { op, task, revision, eventId } = input;
  await tx.exec(
    `UPDATE tasks SET lifecycle_state = 'deleted', revision = ?, lifecycle_generation = lifecycle_generation + 1,
            external_id = NULL, external_id_settled_at = NULL, wip_admitted = ?, admitted_at = NULL,
            queued_for_step_id = NULL, queued_at = NULL, awaits_blockers = ?, deleted_at = ${tx.now},
            deletion_operation_id = ?, updated_at = ${tx.now}
      WHERE id = ? AND lifecycle_state <> 'deleted'`,
    [revision, false, false, ctx.deletionId, op.task_id],
  );
  await tx.exec(`UPDATE task_identities SET state = 'deleted', updated_at = ${tx.now} WHERE task_id = ?`, [op.task_id]);
  await tx.exec(
    `INSERT INTO task_revisions (task_id, revision, workspace_id, kind, operation_id, event_id, created_at)
     VALUES (?, ?, ?, 'deleted', ?, ?, ${tx.now})`,
    [op.task_id, revision, op.workspace_id, ctx.deletionId, eventId],
  );
  tx.lockRow(TIER.OUTBOX, 'event_outbox', eventId);
  const payload = {
    version: 1,
    type: 'task.deleted',
    event_id: eventId,
    task_id: op.task_id,
    workspace_id: op.workspace_id,
    operation_id: ctx.deletionId,
    creation_operation_id: op.id,
    revision,
    reason: ctx.reason,
    external_id_released: task.external_id !== null,
  };
  await tx.exec(
    `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at)
     VALUES (?, ?, ?, ?, 'task.deleted', ?, ?, ?, ${tx.now})`,
    [eventId, op.workspace_id, op.task_id, revision, ctx.deletionId, canonicalJson(payload), payloadHash(payload)],
  );
}

export async function deleteTaskLocked(
  tx: Tx,
  input: Omit<DeletionInput, 'dispatches' | 'reason'>,
  ctx: DeletionContext,
): Promise<TaskDeletionOutcome> {
  const effects = await deleteTaskEffectsLocked(tx, input, ctx);
  const revision = input.task.revision + 1;
  const eventId = randomUUID();
  await tombstoneTaskLocked(tx, { op: input.op, task: input.task, revision, eventId }, ctx);
  return { ...effects, revision, eventId };
}
