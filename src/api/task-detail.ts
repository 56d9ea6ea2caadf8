/**
 * Read models for tasks (plain autocommit reads, no transaction): the task
 * view of `GET /tasks/:id` with placement (step, WIP slot or queue place),
 * blockers, agent session, launch dispatch state and one `launch_state`
 * summary, and the JSON shape of a task in create responses.
 */
import { bool, readRows, type Db } from '../db/tx';
import { TASK_VIEW_COLUMNS, toTaskView } from '../store/task-view';
import type { TaskView } from '../store/types';

export interface TaskDetail extends TaskView {
  lifecycle_state: string;
  revision: number;
  wip_admitted: boolean;
  queued_for_step_id: string | null;
  external_id_settled_at: Date | null;
  updated_at: Date;
  blocked_by: string[];
  /** The blockers not yet done (`POST /tasks/:id/done`); a deferred start waits for this to empty. */
  blocked_by_open: string[];
  session: Record<string, unknown> | null;
  launch: Record<string, unknown> | null;
  /**
   * Where the task's agent stands: `none` (no agent asked for), `awaiting_blockers` (a deferred start whose
   * blockers are not all done), `preparing` (its creation has not completed), `queued` (no free WIP slot in its
   * step), `pending` (admitted, its launch not yet claimed), or its dispatch claim's state (`running`,
   * `succeeded`, `retry_wait`, `unknown`, `cancelled`, `transferred`).
   */
  launch_state: string;
}

type DetailRow = Omit<TaskView, 'creation_complete'> & {
  lifecycle_state: string;
  revision: number | string;
  wip_admitted: unknown;
  queued_for_step_id: string | null;
  external_id_settled_at: Date | null;
  updated_at: Date;
};

/** The task body of a create response; CreatedIdentityLost omits `external_id` (companion notes §2). */
export function taskBody(task: TaskView, includeExternalId: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { ...task };
  if (!includeExternalId) delete body.external_id;
  return body;
}

export async function readTaskDetail(db: Db, taskId: string): Promise<TaskDetail | null> {
  const rows = await readRows<DetailRow>(
    db,
    `SELECT ${TASK_VIEW_COLUMNS}, lifecycle_state, revision, wip_admitted, queued_for_step_id, external_id_settled_at, updated_at
       FROM tasks WHERE id = ?`,
    [taskId],
  );
  const row = rows[0];
  if (!row) return null;
  const { lifecycle_state, revision, wip_admitted, queued_for_step_id, external_id_settled_at, updated_at, ...view } =
    row;
  const blockers = await readRows<{ blocker_task_id: string; lifecycle_state: string | null }>(
    db,
    `SELECT b.blocker_task_id, t.lifecycle_state FROM task_blockers b LEFT JOIN tasks t ON t.id = b.blocker_task_id
      WHERE b.task_id = ? ORDER BY b.blocker_task_id`,
    [taskId],
  );
  const sessions = await readRows<Record<string, unknown>>(
    db,
    `SELECT id, environment_id, executor_id, executor_profile_id, agent_profile_id, state, operation_id, created_at, updated_at
       FROM task_sessions WHERE task_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`,
    [taskId],
  );
  const launches = await readRows<Record<string, unknown>>(
    db,
    `SELECT id, session_id, creation_operation_id, state, generation, attempt, lifecycle_generation, error_code, created_at, updated_at
       FROM task_launch_dispatch_claims WHERE task_id = ? ORDER BY created_at DESC, id DESC LIMIT 1`,
    [taskId],
  );
  const intents = await readRows<{ state: string }>(
    db,
    `SELECT s.state FROM task_creation_steps s WHERE s.operation_id = ? AND s.kind = 'launch_intent'`,
    [view.creation_operation_id],
  );
  const launch = launches[0]
    ? {
        ...launches[0],
        generation: Number(launches[0].generation),
        attempt: Number(launches[0].attempt),
        lifecycle_generation: Number(launches[0].lifecycle_generation),
      }
    : null;
  const launchState = launches[0]
    ? String(launches[0].state)
    : queued_for_step_id !== null
      ? 'queued'
      : intents.some((i) => i.state === 'armed')
        ? view.creation_state === 'completed'
          ? 'pending'
          : 'preparing'
        : view.start_policy === 'immediate'
          ? 'preparing'
          : view.start_policy === 'deferred'
            ? 'awaiting_blockers'
            : 'none';
  return {
    ...toTaskView(view),
    lifecycle_state,
    revision: Number(revision),
    wip_admitted: bool(wip_admitted),
    queued_for_step_id,
    external_id_settled_at,
    updated_at,
    blocked_by: blockers.map((b) => b.blocker_task_id),
    blocked_by_open: blockers.filter((b) => b.lifecycle_state !== 'done').map((b) => b.blocker_task_id),
    session: sessions[0] ?? null,
    launch,
    launch_state: launchState,
  };
}
