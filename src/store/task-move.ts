/**
 * MoveTask (`PATCH /tasks/:id {workflow_step_id}`): a created task moves to
 * another step of its workflow, leaving and taking WIP slots
 * (store/wip-admission.ts).
 *
 * One transaction, in the global lock order: workspace 1 (share; it must be
 * `active`); the admission locks of the source and target steps 2 (FOR
 * UPDATE, ascending ID); the task's row and the rows of the queued tasks a
 * freed slot admits 5.2 (FOR UPDATE, ascending ID). No operation, step or
 * outbox row: a move writes no event and never launches by itself.
 * - Refusals, zero writes: unknown task or target step, or a step of another
 *   workspace (`not_found`); a step of another workflow (`workflow_mismatch`);
 *   the task still being created (`creation_state_conflict`) or deleted
 *   (`task_deleted`); the workspace being deleted (`workspace_deleting`).
 * - Moving to the step the task is in: nothing written, `moved: false`.
 * - A task that takes part in WIP (it holds a slot, or waits in a queue)
 *   leaves its source step's slot or queue; a freed slot admits the oldest
 *   queued tasks of the source step. In the target step it takes a free slot
 *   or joins the back of the queue. A task that never launches (no agent, a
 *   deferred start not yet resolved) takes no slot anywhere.
 * Returns the tasks that newly hold a slot: the caller wakes their launch
 * after the commit (a crash in between is healed by the reaper's sweep,
 * which finds recent admissions whose armed launch has no claim).
 * The task moving between the unlocked peek and its lock restarts the
 * command from tier 1.
 */
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import {
  admitLocked,
  admittedCountLocked,
  enqueueLocked,
  hasFreeSlot,
  lockAdmissionStepsLocked,
  placementOf,
  promotionHeadsLocked,
  type QueueHead,
} from './wip-admission';

export interface MoveResult {
  task_id: string;
  workspace_id: string;
  from_step_id: string;
  to_step_id: string;
  moved: boolean;
  /** Holds a WIP slot of its step after the move. */
  wip_admitted: boolean;
  queued_for_step_id: string | null;
  /** Tasks that newly hold a slot (promoted from the source queue, or this task): wake their launches. */
  admitted: string[];
}

interface TaskRow {
  id: string;
  workspace_id: string;
  workflow_id: string | null;
  workflow_step_id: string | null;
  creation_state: string;
  lifecycle_state: string;
  wip_admitted: unknown;
  queued_for_step_id: string | null;
}

const TASK_COLUMNS =
  'id, workspace_id, workflow_id, workflow_step_id, creation_state, lifecycle_state, wip_admitted, queued_for_step_id';

/** Why 5: the task only moves under us when another move of it wins; twice in a row is already rare. */
const MAX_PLACEMENT_CHANGES = 5;

function refuseState(task: TaskRow): void {
  if (task.lifecycle_state === 'deleted') {
    throw new ConflictError('task_deleted', 'task is deleted', { task_id: task.id });
  }
  if (task.creation_state !== 'completed') {
    throw new ConflictError(
      'creation_state_conflict',
      `task is still being created (${task.creation_state}); it can be moved once created`,
      { task_id: task.id, creation_state: task.creation_state },
    );
  }
}

async function moveOnce(tx: Tx, taskId: string, targetStepId: string): Promise<MoveResult | 'moved'> {
  const peek = await tx.one<TaskRow>(`SELECT ${TASK_COLUMNS} FROM tasks WHERE id = ?`, [taskId]);
  if (!peek) throw new TaskLedgerError('not_found', `task ${taskId} does not exist`, { task_id: taskId });
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  const ws = await tx.one<{ state: string }>(`SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, [
    peek.workspace_id,
  ]);
  if (!ws || ws.state !== 'active') {
    throw new ConflictError('workspace_deleting', 'the workspace is being deleted', {
      workspace_id: peek.workspace_id,
    });
  }
  const from = peek.workflow_step_id;
  const steps = await lockAdmissionStepsLocked(tx, from === null ? [targetStepId] : [from, targetStepId]);
  const target = steps.get(targetStepId);
  if (!target || target.workspace_id !== peek.workspace_id) {
    throw new TaskLedgerError('not_found', 'no such workflow step in this workspace', {
      field: '/workflow_step_id',
      workflow_step_id: targetStepId,
    });
  }
  // Under the source step's admission lock the task's slot and queue place are exact; re-read them.
  const now = await tx.one<TaskRow>(`SELECT ${TASK_COLUMNS} FROM tasks WHERE id = ?`, [taskId]);
  if (!now || now.workflow_step_id !== from) return 'moved';
  refuseState(now);
  if (now.workflow_id === null || target.workflow_id !== now.workflow_id) {
    throw new ConflictError('workflow_mismatch', 'the target step belongs to another workflow than the task', {
      task_id: taskId,
      workflow_id: now.workflow_id,
      target_workflow_id: target.workflow_id,
    });
  }
  const before = placementOf(now);
  const result: MoveResult = {
    task_id: taskId,
    workspace_id: now.workspace_id,
    from_step_id: from!,
    to_step_id: targetStepId,
    moved: from !== targetStepId,
    wip_admitted: before.wip_admitted,
    queued_for_step_id: before.queued_for_step_id,
    admitted: [],
  };
  if (!result.moved) return result;

  const source = steps.get(from!);
  const heads: QueueHead[] = before.wip_admitted && source ? await promotionHeadsLocked(tx, source, 1) : [];
  const ids = [...new Set([taskId, ...heads.map((h) => h.task_id)])].sort();
  for (const id of ids) tx.lockRow(TIER.TASK, 'tasks', id);
  const locked = await tx.rows<TaskRow>(
    `SELECT ${TASK_COLUMNS} FROM tasks WHERE id IN (${ids.map(() => '?').join(', ')}) ORDER BY id FOR UPDATE`,
    ids,
  );
  const mine = locked.find((r) => r.id === taskId);
  // An unlimited step admits launches without its admission lock; under the task lock the placement is final.
  if (!mine || mine.workflow_step_id !== from) return 'moved';
  const placement = placementOf(mine);

  // Count the target's slots before the task enters it: once moved, a task holding a slot would count itself.
  const targetAdmitted = await admittedCountLocked(tx, targetStepId);
  await tx.exec(`UPDATE tasks SET workflow_step_id = ?, updated_at = ${tx.now} WHERE id = ?`, [targetStepId, taskId]);
  if (placement.wip_admitted || placement.queued_for_step_id !== null) {
    if (hasFreeSlot(target, targetAdmitted)) {
      if (!placement.wip_admitted) {
        await admitLocked(tx, [taskId]);
        result.admitted.push(taskId);
      }
      result.wip_admitted = true;
      result.queued_for_step_id = null;
    } else {
      await enqueueLocked(tx, taskId, targetStepId);
      result.wip_admitted = false;
      result.queued_for_step_id = targetStepId;
    }
  }
  const promoted = heads.map((h) => h.task_id).filter((id) => id !== taskId);
  await admitLocked(tx, promoted);
  result.admitted.push(...promoted);
  return result;
}

export async function moveTask(db: Db, taskId: string, targetStepId: string): Promise<MoveResult> {
  for (let i = 0; i < MAX_PLACEMENT_CHANGES; i++) {
    const res = await runTransaction(db, 'MoveTask', (tx) => moveOnce(tx, taskId, targetStepId));
    if (res !== 'moved') return res;
  }
  throw new TaskLedgerError('retry_exhausted', `task ${taskId} kept moving while being moved`, { task_id: taskId });
}
