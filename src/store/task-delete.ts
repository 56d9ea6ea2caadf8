/**
 * DeleteTask (`DELETE /tasks/:id`): a created task is deleted, its external
 * ID freed, its WIP slot given back, and every effect it still has in the
 * world handed to a cleanup job that removes it (the agent stopped, the
 * worktree and branch removed, the provider marker comment deleted, the
 * attachment files and every effect row deleted).
 *
 * One transaction, in the global lock order: workspace 1 (share; `active`),
 * the task's admission step 2 (FOR UPDATE), the creation operation 4.2 (the
 * guard re-derives its stored bindings), the external-ID key 5.1, the task
 * row and the rows of the queued tasks its freed slot admits 5.2 (FOR
 * UPDATE, ascending), identity 6, steps 7, then `deleteTaskLocked`
 * (store/task-delete-locked.ts): cleanup jobs 8.1, dispatch claims 8.2,
 * task environments 11.1, the tombstone, revision N and one `task.deleted`
 * event 16.
 * - Refusals, zero writes: unknown task (`not_found`); still being created
 *   (`creation_state_conflict`); the workspace being deleted
 *   (`workspace_deleting`).
 * - Already deleted: nothing written, `{deleted: false}` (a retried request
 *   deletes nothing twice and fires no second event).
 * Returns the tasks the freed slot admitted (the caller wakes their
 * launches after the commit) and the cleanup jobs (the caller may wake the
 * cleanup worker; its periodic pass runs them anyway). The task moving
 * between the unlocked peek and its lock restarts the command.
 */
import { randomUUID } from 'node:crypto';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { lockStepsLocked } from './step-rows';
import { deleteTaskLocked, type DeletionJobBuilder, type TaskDeletionOutcome } from './task-delete-locked';
import { admitLocked, lockAdmissionStepsLocked, placementOf, promotionHeadsLocked } from './wip-admission';

export type DeleteTaskResult =
  | ({ deleted: true; task_id: string; workspace_id: string; deletion_id: string; admitted: string[] } & Omit<
      TaskDeletionOutcome,
      'cancelledLaunches' | 'transferredLaunches'
    >)
  | { deleted: false; task_id: string; workspace_id: string };

export interface DeleteTaskOptions {
  /** Who asked (recorded as the guard's actor). */
  requestedBy: string;
  jobs: DeletionJobBuilder;
}

/** Why 5: the task only moves under us when a concurrent move of it wins; twice in a row is already rare. */
const MAX_PLACEMENT_CHANGES = 5;

interface Peek {
  workspace_id: string;
  workflow_step_id: string | null;
  creation_operation_id: string;
  wip_admitted: unknown;
  queued_for_step_id: string | null;
}

async function deleteOnce(tx: Tx, taskId: string, options: DeleteTaskOptions): Promise<DeleteTaskResult | 'moved'> {
  const peekSql =
    'SELECT workspace_id, workflow_step_id, creation_operation_id, wip_admitted, queued_for_step_id FROM tasks WHERE id = ?';
  const peek = await tx.one<Peek>(peekSql, [taskId]);
  if (!peek) throw new TaskLedgerError('not_found', `task ${taskId} does not exist`, { task_id: taskId });
  const stepId = peek.workflow_step_id;
  // Tier 1 (the guard takes it again below: already held) and 2: the admission lock of the task's step.
  const wsLock = `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`;
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  const ws = await tx.one<{ state: string }>(wsLock, [peek.workspace_id]);
  if (!ws || ws.state !== 'active') {
    throw new ConflictError('workspace_deleting', 'the workspace is being deleted', {
      workspace_id: peek.workspace_id,
    });
  }
  const steps = await lockAdmissionStepsLocked(tx, stepId === null ? [] : [stepId]);
  // Under the step's admission lock, the task's slot is exact (re-read); a freed slot admits the queue's oldest.
  const now = stepId === null ? peek : await tx.one<Peek>(peekSql, [taskId]);
  if (!now || now.workflow_step_id !== stepId) return 'moved';
  const step = stepId === null ? undefined : steps.get(stepId);
  const heads = placementOf(now).wip_admitted && step ? await promotionHeadsLocked(tx, step, 1) : [];

  const { op, plan, externalIdAbsent } = await guardOperationLocked(
    tx,
    { kind: 'operation', operationId: now.creation_operation_id, actor: options.requestedBy },
    { externalIdKey: true, steps: true },
  );
  const { task } = await lockTaskChainLocked(tx, op, {
    externalIdKey: true,
    externalIdAbsent,
    steps: true,
    heads: heads.map((h) => h.task_id),
  });
  if (!task || task.id !== taskId) throw new TaskLedgerError('not_found', `task ${taskId} does not exist`, {});
  if (task.workflow_step_id !== stepId) return 'moved';
  if (task.lifecycle_state === 'deleted') {
    return { deleted: false, task_id: taskId, workspace_id: task.workspace_id };
  }
  if (task.creation_state !== 'completed' || op.state !== 'completed') {
    throw new ConflictError(
      'creation_state_conflict',
      `task is still being created (${task.creation_state}); it can be deleted once created`,
      { task_id: taskId, creation_state: task.creation_state },
    );
  }
  const stepRows = await lockStepsLocked(tx, op.id);
  const deletionId = randomUUID();
  const outcome = await deleteTaskLocked(
    tx,
    { op, plan, task, steps: stepRows },
    { deletionId, reason: 'task_deleted', jobs: options.jobs, cancelArmedIntents: false },
  );
  const admitted = heads.map((h) => h.task_id);
  await admitLocked(tx, admitted);
  return {
    deleted: true,
    task_id: taskId,
    workspace_id: task.workspace_id,
    deletion_id: deletionId,
    admitted,
    revision: outcome.revision,
    eventId: outcome.eventId,
    cleanupJobIds: outcome.cleanupJobIds,
  };
}

export async function deleteTask(db: Db, taskId: string, options: DeleteTaskOptions): Promise<DeleteTaskResult> {
  for (let i = 0; i < MAX_PLACEMENT_CHANGES; i++) {
    const res = await runTransaction(db, 'DeleteTask', (tx) => deleteOnce(tx, taskId, options));
    if (res !== 'moved') return res;
  }
  throw new TaskLedgerError('retry_exhausted', `task ${taskId} kept moving while being deleted`, { task_id: taskId });
}
