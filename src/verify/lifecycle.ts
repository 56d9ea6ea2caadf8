/**
 * `taskledger verify`'s checks of the task's life after creation
 * (docs/adr/0009-task-lifecycle.md), over one snapshot, reads only:
 * - `wip_slots`: no step with a WIP limit holds more admitted tasks than its
 *   limit;
 * - `wip_queue`: a queued task waits in its own step's queue, holds no slot,
 *   is not deleted and has a launch to wait for; and in an active workspace
 *   no task waits while its step has a free slot (a lost promotion);
 * - `launch_count`: one accepted create, at most one session, one dispatch
 *   claim and one runtime;
 * - `task_deleted`: a deleted task has exactly one `task.created` and one
 *   `task.deleted` (at its last revision, with its `deleted` revision row),
 *   a `deleted` identity, no external ID and no slot or queue place; every
 *   `task.deleted` names a deleted task;
 * - `workspace_deletion`: a workspace being deleted or deleted has its
 *   deletion; a completed deletion left its workspace `deleted` with no
 *   live task, no unfinished creation and no launch that could still start.
 */
import { readSnapshot, type SnapshotReader } from '../db/snapshot';
import { bool, type Db } from '../db/tx';
import type { Drift, DriftCode } from './drift';

interface Finding {
  code: DriftCode;
  operation_id: string | null;
  task_id: string | null;
  subject: string;
  message: string;
}

type Scope = { sql: (column: string) => string; params: string[] };

function scopeOf(workspaceId: string | undefined): Scope {
  return {
    sql: (column) => (workspaceId ? ` AND ${column} = ?` : ''),
    params: workspaceId ? [workspaceId] : [],
  };
}

async function wipChecks(read: SnapshotReader, scope: Scope, out: Finding[]): Promise<void> {
  const full = await read<{ id: string; wip_limit: number | string; admitted: number | string }>(
    `SELECT s.id, s.wip_limit, COUNT(t.id) AS admitted FROM workflow_steps s
       JOIN tasks t ON t.workflow_step_id = s.id AND t.wip_admitted = ? AND t.lifecycle_state <> 'deleted'
      WHERE s.wip_limit > 0${scope.sql('s.workspace_id')}
      GROUP BY s.id, s.wip_limit HAVING COUNT(t.id) > s.wip_limit`,
    [true, ...scope.params],
  );
  for (const s of full) {
    out.push({
      code: 'wip_slots',
      operation_id: null,
      task_id: null,
      subject: `workflow step ${s.id}`,
      message: `${Number(s.admitted)} admitted tasks for a WIP limit of ${Number(s.wip_limit)}`,
    });
  }
  const queued = await read<{
    id: string;
    creation_operation_id: string;
    queued_for_step_id: string;
    workflow_step_id: string | null;
    wip_admitted: unknown;
    lifecycle_state: string;
    wip_limit: number | string | null;
    ws_state: string;
    admitted: number | string;
    intents: number | string;
  }>(
    `SELECT t.id, t.creation_operation_id, t.queued_for_step_id, t.workflow_step_id, t.wip_admitted, t.lifecycle_state,
            s.wip_limit, w.state AS ws_state,
            (SELECT COUNT(*) FROM tasks a WHERE a.workflow_step_id = t.queued_for_step_id AND a.wip_admitted = ?
                AND a.lifecycle_state <> 'deleted') AS admitted,
            (SELECT COUNT(*) FROM task_creation_steps i WHERE i.operation_id = t.creation_operation_id
                AND i.kind = 'launch_intent' AND i.state = 'armed') AS intents
       FROM tasks t JOIN workspaces w ON w.id = t.workspace_id LEFT JOIN workflow_steps s ON s.id = t.queued_for_step_id
      WHERE t.queued_for_step_id IS NOT NULL${scope.sql('t.workspace_id')}`,
    [true, ...scope.params],
  );
  for (const q of queued) {
    const why: string[] = [];
    if (bool(q.wip_admitted)) why.push('it also holds a slot');
    if (q.workflow_step_id !== q.queued_for_step_id) why.push('it waits in the queue of another step than its own');
    if (q.lifecycle_state === 'deleted') why.push('it is deleted');
    if (Number(q.intents) === 0) why.push('it has no armed launch intent to wait for');
    const limit = Number(q.wip_limit ?? 0);
    if (q.ws_state === 'active' && (limit === 0 || Number(q.admitted) < limit)) {
      why.push(
        `its step has a free slot (${Number(q.admitted)} of ${limit === 0 ? 'unlimited' : limit}): a lost promotion`,
      );
    }
    for (const message of why) {
      out.push({
        code: 'wip_queue',
        operation_id: q.creation_operation_id,
        task_id: q.id,
        subject: `task ${q.id}`,
        message,
      });
    }
  }
}

async function launchCounts(read: SnapshotReader, scope: Scope, out: Finding[]): Promise<void> {
  for (const table of ['task_sessions', 'task_launch_dispatch_claims', 'executors_running']) {
    const rows = await read<{ task_id: string; n: number | string }>(
      `SELECT task_id, COUNT(*) AS n FROM ${table} WHERE 1 = 1${scope.sql('workspace_id')}
        GROUP BY task_id HAVING COUNT(*) > 1`,
      scope.params,
    );
    for (const r of rows) {
      out.push({
        code: 'launch_count',
        operation_id: null,
        task_id: r.task_id,
        subject: `task ${r.task_id}`,
        message: `${Number(r.n)} ${table} rows for one accepted create`,
      });
    }
  }
}

async function deletedTasks(read: SnapshotReader, scope: Scope, out: Finding[]): Promise<void> {
  const rows = await read<Record<string, unknown>>(
    `SELECT t.id, t.creation_operation_id, t.revision, t.external_id, t.wip_admitted, t.queued_for_step_id,
            (SELECT COUNT(*) FROM event_outbox e WHERE e.task_id = t.id AND e.type = 'task.created') AS created,
            (SELECT COUNT(*) FROM event_outbox e WHERE e.task_id = t.id AND e.type = 'task.deleted') AS deleted,
            (SELECT COUNT(*) FROM event_outbox e WHERE e.task_id = t.id AND e.type = 'task.deleted'
                AND e.revision = t.revision) AS at_revision,
            (SELECT COUNT(*) FROM task_revisions r WHERE r.task_id = t.id AND r.kind = 'deleted'
                AND r.revision = t.revision) AS revision_rows,
            (SELECT i.state FROM task_identities i WHERE i.task_id = t.id) AS identity
       FROM tasks t WHERE t.lifecycle_state = 'deleted'${scope.sql('t.workspace_id')}`,
    scope.params,
  );
  for (const r of rows) {
    const why: string[] = [];
    if (Number(r.created) !== 1) why.push(`${Number(r.created)} task.created events`);
    if (Number(r.deleted) !== 1) why.push(`${Number(r.deleted)} task.deleted events`);
    else if (Number(r.at_revision) !== 1) why.push('its task.deleted is not at its last revision');
    if (Number(r.revision_rows) !== 1) why.push('no deleted revision row at its last revision');
    if (r.identity !== 'deleted') why.push(`its identity is ${String(r.identity)}`);
    if (r.external_id !== null) why.push('it still holds its external ID');
    if (bool(r.wip_admitted) || r.queued_for_step_id !== null) why.push('it still holds a WIP slot or queue place');
    const id = String(r.id);
    for (const message of why) {
      out.push({
        code: 'task_deleted',
        operation_id: String(r.creation_operation_id),
        task_id: id,
        subject: `task ${id}`,
        message,
      });
    }
  }
  const stray = await read<{ event_id: string; task_id: string; operation_id: string }>(
    `SELECT e.event_id, e.task_id, e.operation_id FROM event_outbox e LEFT JOIN tasks t ON t.id = e.task_id
      WHERE e.type = 'task.deleted' AND (t.id IS NULL OR t.lifecycle_state <> 'deleted')${scope.sql('e.workspace_id')}`,
    scope.params,
  );
  for (const e of stray) {
    out.push({
      code: 'task_deleted',
      operation_id: e.operation_id,
      task_id: e.task_id,
      subject: `event ${e.event_id}`,
      message: 'task.deleted for a task that is not deleted',
    });
  }
}

async function workspaceDeletions(read: SnapshotReader, scope: Scope, out: Finding[]): Promise<void> {
  const rows = await read<Record<string, unknown>>(
    `SELECT w.id AS workspace_id, w.state AS ws_state, d.id, d.state,
            (SELECT COUNT(*) FROM tasks t WHERE t.workspace_id = w.id AND t.lifecycle_state <> 'deleted') AS live,
            (SELECT COUNT(*) FROM task_creation_operations o WHERE o.workspace_id = w.id
                AND o.state IN ('preparing', 'preparing-release', 'completing')) AS unfinished,
            (SELECT COUNT(*) FROM task_launch_dispatch_claims c WHERE c.workspace_id = w.id
                AND c.state IN ('planned', 'running', 'unknown', 'retry_wait')) AS launches,
            (SELECT COUNT(*) FROM task_creation_steps s WHERE s.workspace_id = w.id AND s.kind = 'launch_intent'
                AND s.state = 'armed' AND EXISTS (SELECT 1 FROM tasks x WHERE x.id = s.task_id
                AND x.lifecycle_state <> 'deleted')) AS armed
       FROM workspaces w LEFT JOIN workspace_deletions d ON d.workspace_id = w.id
      WHERE (w.state <> 'active' OR d.id IS NOT NULL)${scope.sql('w.id')}`,
    scope.params,
  );
  for (const r of rows) {
    const subject = `workspace ${String(r.workspace_id)}`;
    const deletionId = typeof r.id === 'string' ? r.id : null;
    const why: string[] = [];
    if (deletionId === null) why.push(`${String(r.ws_state)} without a workspace deletion`);
    else if (r.state === 'completed') {
      if (r.ws_state !== 'deleted') why.push(`the deletion completed but the workspace is ${String(r.ws_state)}`);
      if (Number(r.live) > 0) why.push(`${Number(r.live)} tasks not deleted`);
      if (Number(r.unfinished) > 0) why.push(`${Number(r.unfinished)} creations not ended`);
      if (Number(r.launches) + Number(r.armed) > 0) why.push('a launch that could still start');
    } else if (r.ws_state !== 'deleting') why.push(`a running deletion, but the workspace is ${String(r.ws_state)}`);
    for (const message of why) {
      out.push({ code: 'workspace_deletion', operation_id: deletionId, task_id: null, subject, message });
    }
  }
}

export async function checkLifecycle(db: Db, options: { workspaceId?: string }): Promise<Drift[]> {
  const findings = await readSnapshot(db, async (read) => {
    const out: Finding[] = [];
    const scope = scopeOf(options.workspaceId);
    await wipChecks(read, scope, out);
    await launchCounts(read, scope, out);
    await deletedTasks(read, scope, out);
    await workspaceDeletions(read, scope, out);
    return out;
  });
  return findings.map((f) => ({ ...f, operation_id: f.operation_id ?? '', task_id: f.task_id ?? '' }));
}
