/**
 * Reads the caller-visible task shape. Only exact external-ID lookup may show
 * a task whose creation is unsettled (`preparing|completing`).
 */
import type { TaskCreationState } from '../domain/vocab';
import type { Tx } from '../db/tx';
import { readRows, type Db } from '../db/tx';
import type { TaskView } from './types';

export const TASK_VIEW_COLUMNS =
  'id, workspace_id, title, description, external_id, creation_state, creation_operation_id, workflow_id, workflow_step_id, parent_id, start_policy, created_at';

export type TaskViewRow = Omit<TaskView, 'creation_complete'>;

export function toTaskView(row: TaskViewRow): TaskView {
  return { ...row, creation_complete: row.creation_state === 'completed' };
}

export function isSettled(state: TaskCreationState): boolean {
  return state === 'completed';
}

/** Exact, byte-for-byte lookup (binary no-pad collation on both dialects). */
export async function findByExternalId(db: Db, workspaceId: string, externalId: string): Promise<TaskView | null> {
  const rows = await readRows<TaskViewRow>(
    db,
    `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE workspace_id = ? AND external_id = ?`,
    [workspaceId, externalId],
  );
  return rows[0] ? toTaskView(rows[0]) : null;
}

export async function findByExternalIdLocked(
  tx: Tx,
  workspaceId: string,
  externalId: string,
): Promise<TaskView | null> {
  const row = await tx.one<TaskViewRow>(
    `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE workspace_id = ? AND external_id = ?`,
    [workspaceId, externalId],
  );
  return row ? toTaskView(row) : null;
}

export async function getTaskView(db: Db, taskId: string): Promise<TaskView | null> {
  const rows = await readRows<TaskViewRow>(db, `SELECT ${TASK_VIEW_COLUMNS} FROM tasks WHERE id = ?`, [taskId]);
  return rows[0] ? toTaskView(rows[0]) : null;
}
