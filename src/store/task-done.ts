/**
 * MarkTaskDone (`POST /tasks/:id/done`): a completed, live task becomes
 * `done`, and each completed, live task it blocked whose blockers are now all
 * done gets its one `task.dependencies_resolved` event. The spec's deferred
 * start "promotes only from the later dependencies_resolved transition of the
 * last unresolved predecessor (deletion never fires it)": this is that
 * transition; the event's delivery promotes and launches
 * (`store/deferred-launch.ts`, `outbox/dispatcher.ts`).
 *
 * A done task is no longer work in progress: it gives back its WIP slot (or
 * leaves its step's queue), the freed slot admits the step's oldest queued
 * task (returned in `admitted`; the caller wakes its launch), and a launch
 * that never started (claim `planned`/`retry_wait`) is cancelled
 * (`task_done`, session `stopped`); a running agent is left alone.
 *
 * One transaction, in the global lock order: workspace 1 (share); the
 * task's admission step 2 (when it holds a slot or queues); the task rows of
 * the task, the tasks it blocks and their other blockers, and the promoted
 * queue heads 5.2 (FOR UPDATE, ascending UUID — two blockers of one task
 * marked done at once serialize here, so the later one sees the earlier one
 * done and fires the event exactly once); the task's pending dispatch claims
 * 8.2 and their sessions 9; outbox rows 16 (ascending event ID). Completing a
 * creation writes its task row under the same 5.2 lock, so a task's
 * `creation_state` read here is exact.
 * - task absent: `not_found`; still being created (`preparing|completing`)
 *   or deleted: `creation_state_conflict`; its workspace being deleted:
 *   `workspace_deleting`; nothing written.
 * - already `done`: nothing written, `already_done: true` (a retried request
 *   fires nothing twice).
 * - only a task that awaits its blockers resolves (`tasks.awaits_blockers`:
 *   Begin sets it when some blocker was not yet done; its resolution clears
 *   it): the spec promotes "only from the later transition", so a task whose
 *   blockers were all done before it was created never resolves.
 * - a blocked task still being created (`preparing|completing`) gets no event
 *   here — none may precede its `task.created` — and is reported as
 *   `resolution_pending`; its Complete's phase B locks its blockers' rows
 *   (5.2, shared), sees them all done and writes the event right after
 *   `task.created` (store/complete.ts). Whichever commits second decides, so
 *   the event is written once, and also when the blocked task's edge did not
 *   exist yet when this command ran.
 * Writes: the task's `lifecycle_state = 'done'`; per resolved task, its
 * revision + 1, `awaits_blockers` false, and one `task.dependencies_resolved`
 * event at that revision (unique per task and revision) naming its creation
 * operation, start policy and this task. The blocker edges are read before
 * the locks and again under them; when they differ (or the task's placement
 * changed under a concurrent move), the command restarts from tier 1.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson, sameJson } from '../canonical/canonical-json';
import { payloadHash } from '../canonical/hash';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { bool, runTransaction, type Db, type Tx } from '../db/tx';
import { endDispatchLocked } from './launch-dispatch-end';
import {
  admitLocked,
  lockAdmissionStepsLocked,
  placementOf,
  promotionHeadsLocked,
  releaseSlotLocked,
  type Placement,
} from './wip-admission';

export interface MarkDoneResult {
  task_id: string;
  workspace_id: string;
  already_done: boolean;
  /** The tasks whose last blocker this was, each given its `task.dependencies_resolved` event (ascending ID). */
  dependencies_resolved: string[];
  /** Tasks whose last blocker this was that are still being created: their Complete fires the event. */
  resolution_pending: string[];
  /** Queued tasks the done task's freed WIP slot admitted (the caller wakes their launches). */
  admitted: string[];
}

export interface ResolvedEvent {
  eventId: string;
  taskId: string;
  workspaceId: string;
  operationId: string;
  revision: number;
  startPolicy: string;
  /** The blocker whose done resolved the last dependency; null when it resolved while the task was being created. */
  resolvedBy: string | null;
}

/**
 * Inserts one `task.dependencies_resolved` (MarkTaskDone, or Complete's phase
 * B for a resolution that waited for it). The caller holds the task row (5.2)
 * and has set its revision; this registers the outbox row (16).
 */
export async function insertResolvedEventLocked(tx: Tx, e: ResolvedEvent): Promise<void> {
  tx.lockRow(TIER.OUTBOX, 'event_outbox', e.eventId);
  const payload = {
    version: 1,
    type: 'task.dependencies_resolved',
    event_id: e.eventId,
    task_id: e.taskId,
    workspace_id: e.workspaceId,
    operation_id: e.operationId,
    revision: e.revision,
    start_policy: e.startPolicy,
    resolved_by: e.resolvedBy,
  };
  await tx.exec(
    `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at)
     VALUES (?, ?, ?, ?, 'task.dependencies_resolved', ?, ?, ?, ${tx.now})`,
    [e.eventId, e.workspaceId, e.taskId, e.revision, e.operationId, canonicalJson(payload), payloadHash(payload)],
  );
}

interface Edge {
  task_id: string;
  blocker_task_id: string;
}

interface TaskRow {
  id: string;
  workflow_step_id: string | null;
  wip_admitted: unknown;
  queued_for_step_id: string | null;
  workspace_id: string;
  creation_state: string;
  lifecycle_state: string;
  start_policy: string;
  creation_operation_id: string;
  revision: number | string;
  awaits_blockers: unknown;
}

/** Why 5: the edges only change while a blocked task's creation attaches them; twice in a row is already rare. */
const MAX_EDGE_CHANGES = 5;

/** Every edge of every task `taskId` blocks (the tasks it blocks and all their blockers), in key order. */
async function readEdges(tx: Tx, taskId: string): Promise<Edge[]> {
  return tx.rows<Edge>(
    `SELECT task_id, blocker_task_id FROM task_blockers
      WHERE task_id IN (SELECT task_id FROM task_blockers WHERE blocker_task_id = ?)
      ORDER BY task_id, blocker_task_id`,
    [taskId],
  );
}

async function markTaskDoneOnce(tx: Tx, taskId: string): Promise<MarkDoneResult | 'moved'> {
  const peek = await tx.one<{ workspace_id: string } & Placement>(
    'SELECT workspace_id, workflow_step_id, wip_admitted, queued_for_step_id FROM tasks WHERE id = ?',
    [taskId],
  );
  if (!peek) throw new TaskLedgerError('not_found', `task ${taskId} does not exist`, { task_id: taskId });
  const held = placementOf(peek);
  const before = await readEdges(tx, taskId);
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  const ws = await tx.one<{ state: string }>(`SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, [
    peek.workspace_id,
  ]);
  if (!ws || ws.state !== 'active') {
    throw new ConflictError('workspace_deleting', 'the workspace is being deleted', {
      workspace_id: peek.workspace_id,
    });
  }
  // Tier 2: the admission lock of the step whose slot or queue the task leaves; the freed slot's queue heads.
  const stepId = held.wip_admitted || held.queued_for_step_id !== null ? held.workflow_step_id : null;
  const steps = await lockAdmissionStepsLocked(tx, stepId === null ? [] : [stepId]);
  const step = stepId === null ? undefined : steps.get(stepId);
  const heads = held.wip_admitted && step ? (await promotionHeadsLocked(tx, step, 1)).map((h) => h.task_id) : [];
  const ids = [...new Set([taskId, ...before.flatMap((e) => [e.task_id, e.blocker_task_id]), ...heads])].sort();
  for (const id of ids) tx.lockRow(TIER.TASK, 'tasks', id);
  const locked = await tx.rows<TaskRow>(
    `SELECT id, workspace_id, creation_state, lifecycle_state, start_policy, creation_operation_id, revision, awaits_blockers,
            workflow_step_id, wip_admitted, queued_for_step_id
       FROM tasks WHERE id IN (${ids.map(() => '?').join(', ')}) ORDER BY id FOR UPDATE`,
    ids,
  );
  const edges = await readEdges(tx, taskId);
  if (!sameJson(edges, before)) return 'moved';
  const rows = new Map(locked.map((r) => [r.id, r]));
  const task = rows.get(taskId);
  if (!task) return 'moved';
  const now = placementOf(task);
  const samePlace =
    now.workflow_step_id === held.workflow_step_id &&
    now.wip_admitted === held.wip_admitted &&
    now.queued_for_step_id === held.queued_for_step_id;
  if (!samePlace) return 'moved';
  const result = {
    task_id: taskId,
    workspace_id: task.workspace_id,
    dependencies_resolved: [] as string[],
    resolution_pending: [] as string[],
    admitted: [] as string[],
  };
  if (task.creation_state !== 'completed' || task.lifecycle_state === 'deleted') {
    throw new ConflictError(
      'creation_state_conflict',
      task.creation_state !== 'completed'
        ? `task is still being created (${task.creation_state}); it can be marked done once created`
        : 'task is deleted',
      { task_id: taskId, creation_state: task.creation_state, lifecycle_state: task.lifecycle_state },
    );
  }
  if (task.lifecycle_state === 'done') return { ...result, already_done: true };
  await tx.exec(
    `UPDATE tasks SET lifecycle_state = 'done', updated_at = ${tx.now} WHERE id = ? AND lifecycle_state = 'live'`,
    [taskId],
  );
  if (stepId !== null) {
    await releaseSlotLocked(tx, taskId);
    await admitLocked(tx, heads);
  }
  await cancelPendingLaunchesLocked(tx, taskId);
  const done = (id: string): boolean => id === taskId || rows.get(id)?.lifecycle_state === 'done';
  // Every live task that awaits its blockers and whose blockers are now all done; those created get their event
  // now, those still being created from their own Complete's phase B, which locks these same blocker rows.
  const resolvable = [...new Set(edges.map((e) => e.task_id))].filter((id) => {
    const t = rows.get(id);
    if (!t || t.lifecycle_state !== 'live' || !bool(t.awaits_blockers)) return false;
    return edges.filter((e) => e.task_id === id).every((e) => done(e.blocker_task_id));
  });
  const resolved = resolvable.filter((id) => rows.get(id)!.creation_state === 'completed');
  const pending = resolvable.filter((id) => rows.get(id)!.creation_state !== 'completed');
  const events = resolved.map((id) => ({ eventId: randomUUID(), task: rows.get(id)! }));
  for (const { task: t } of events) {
    await tx.exec(
      `UPDATE tasks SET revision = revision + 1, awaits_blockers = ?, updated_at = ${tx.now} WHERE id = ?`,
      [false, t.id],
    );
  }
  events.sort((a, b) => (a.eventId < b.eventId ? -1 : 1));
  for (const { eventId, task: t } of events) {
    await insertResolvedEventLocked(tx, {
      eventId,
      taskId: t.id,
      workspaceId: t.workspace_id,
      operationId: t.creation_operation_id,
      revision: Number(t.revision) + 1,
      startPolicy: t.start_policy,
      resolvedBy: taskId,
    });
  }
  return {
    ...result,
    already_done: false,
    dependencies_resolved: resolved,
    resolution_pending: pending,
    admitted: heads,
  };
}

/** A launch of the done task that never started ends `cancelled` (`task_done`); a started one is left alone. */
async function cancelPendingLaunchesLocked(tx: Tx, taskId: string): Promise<void> {
  const pending = await tx.rows<{ id: string; session_id: string; state: string }>(
    `SELECT id, session_id, state FROM task_launch_dispatch_claims
      WHERE task_id = ? AND state IN ('planned', 'retry_wait') AND deletion_operation_id IS NULL ORDER BY id`,
    [taskId],
  );
  for (const c of pending) {
    await endDispatchLocked(
      tx,
      { dispatchId: c.id, sessionId: c.session_id },
      { sql: 'state = ?', params: [c.state] },
      'prepared',
      { code: 'task_done', message: 'the task was marked done before its agent started' },
    );
  }
}

export async function markTaskDone(db: Db, taskId: string): Promise<MarkDoneResult> {
  for (let i = 0; i < MAX_EDGE_CHANGES; i++) {
    const res = await runTransaction(db, 'MarkTaskDone', (tx) => markTaskDoneOnce(tx, taskId));
    if (res !== 'moved') return res;
  }
  throw new TaskLedgerError('retry_exhausted', `the tasks blocked by ${taskId} kept changing`, { task_id: taskId });
}
