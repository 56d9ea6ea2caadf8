/**
 * The ledger sweep that makes Redis disposable: every non-terminal operation
 * gets its due wake-ups again (job IDs collapse duplicates), and completed
 * workspaces with undelivered outbox events get a dispatcher wake-up, and a
 * delivered task.created (or, for a deferred start, delivered
 * task.dependencies_resolved) whose armed launch has no dispatch claim yet gets
 * its launch wake-up again (the dispatcher's one was lost with Redis), unless
 * the task waits in its step's WIP queue; so does a task a freed WIP slot
 * admitted recently (the promotion's wake-up was lost). Plain
 * reads only; the full reaper (lease expiry, RecoveryAction) builds on this.
 */
import { LAUNCH_QUEUE, launchJobId, OUTBOX_QUEUE, type LaunchJob, type OutboxJob } from '../../queues/names';
import { readRows, type Db, type SqlParam } from '../db/tx';
import { enqueueRunnable } from '../coordinator/enqueue';
import { addWakeup, type QueueSet } from '../coordinator/queues';

/** Why 500: one sweep's worth of work stays a bounded burst of enqueues. */
const SWEEP_LIMIT = 500;

/**
 * The launch scans' first filter, one probe of `uq_launch_dispatch`'s prefix per event or task read: a creation
 * whose launch was dispatched has a claim row (almost every one a window holds), and is left before its task,
 * operation and launch intent are looked up. A plan carries exactly one launch intent (plan/start-policy.ts), so a
 * claim for the creation's task is a claim for that intent's session: the exact test after the joins stays.
 */
function unclaimed(operationColumn: string, taskColumn: string): string {
  return `NOT EXISTS (SELECT 1 FROM task_launch_dispatch_claims c0
                       WHERE c0.creation_operation_id = ${operationColumn} AND c0.task_id = ${taskColumn})`;
}

export interface SweepResult {
  operations: number;
  outboxWorkspaces: number;
  launches: number;
}

export interface SweepOptions {
  workspaceId?: string;
  /**
   * Look for stranded launches only among announcing events (task.created, or
   * a deferred start's task.dependencies_resolved) delivered within this many milliseconds (an index range on event_outbox
   * `(delivered_at, seq)`), or among all delivered events when null. A long-running reaper scans everything
   * once at its start and then only the recent window, so a sweep's cost does
   * not grow with the ledger's history.
   */
  launchWindowMs?: number | null;
}

export async function sweepWakeups(db: Db, queues: QueueSet, options: SweepOptions = {}): Promise<SweepResult> {
  const { workspaceId, launchWindowMs = null } = options;
  const scope = workspaceId === undefined ? '' : 'AND workspace_id = ?';
  const scopeParams = workspaceId === undefined ? [] : [workspaceId];
  const ops = await readRows<{ id: string }>(
    db,
    `SELECT id FROM task_creation_operations WHERE state IN ('preparing', 'completing') ${scope} ORDER BY updated_at LIMIT ${SWEEP_LIMIT}`,
    scopeParams,
  );
  for (const op of ops) await enqueueRunnable(db, queues, op.id, { replaceFailed: true });
  const pending = await readRows<{ workspace_id: string }>(
    db,
    `SELECT DISTINCT workspace_id FROM event_outbox WHERE delivered_at IS NULL ${scope} LIMIT ${SWEEP_LIMIT}`,
    scopeParams,
  );
  for (const w of pending) {
    await queues.get(OUTBOX_QUEUE).add('dispatch', { workspaceId: w.workspace_id } satisfies OutboxJob, {
      jobId: `outbox-${w.workspace_id}-sweep-${Date.now()}`,
    });
  }
  // The event that announces a launch: task.created for an immediate start, task.dependencies_resolved for a
  // deferred one (its delivery promoted the intent). Delivered means the dispatcher already sent this launch once;
  // a claim row appears when a launch worker takes it.
  // Driven from the delivered announcing events: the window is a range on event_outbox (delivered_at, seq). They
  // are read first, as a materialized set (`announced`) that looks up each event's task by its primary key (a
  // scalar subquery runs once per row), and each is then joined by its keys. Left to itself, a planner without
  // statistics on fresh tables (PostgreSQL before autovacuum's first ANALYZE) guessed the task filter selective
  // and joined every event against every task: 955 ms per sweep at 3,000 tasks, quadratic in them. Now the
  // sweep's cost is its window's events, whatever the planner knows.
  const announced = announcedLaunchesStatement(db.dialect, { workspaceId, launchWindowMs });
  const launches = await readRows<{ operation_id: string; task_id: string; session_id: string }>(
    db,
    announced.sql,
    announced.params,
  );
  // A queued task admitted by a freed WIP slot (store/wip-admission.ts) announced its launch long ago: a recent
  // admission whose wake-up was lost is found by its admission time (ix_tasks_admitted_at) instead.
  if (launchWindowMs !== null) launches.push(...(await recentAdmissions(db, launchWindowMs, workspaceId)));
  for (const l of launches) {
    const job: LaunchJob = { operationId: l.operation_id, taskId: l.task_id, sessionId: l.session_id };
    await addWakeup(
      queues.get(LAUNCH_QUEUE),
      'launch',
      job,
      { jobId: launchJobId(l.operation_id, l.session_id) },
      true,
    );
  }
  return { operations: ops.length, outboxWorkspaces: pending.length, launches: launches.length };
}

/** The launch sweep's read of announced launches without a dispatch claim (see `sweepWakeups`). */
export function announcedLaunchesStatement(
  dialect: Db['dialect'],
  options: { workspaceId?: string; launchWindowMs: number | null },
): { sql: string; params: SqlParam[] } {
  const { workspaceId, launchWindowMs } = options;
  const scope = workspaceId === undefined ? '' : 'AND e.workspace_id = ?';
  const window =
    launchWindowMs === null
      ? ''
      : `AND e.delivered_at > ${dialect === 'postgres' ? "clock_timestamp() - CAST(? AS integer) * interval '1 millisecond'" : 'NOW(3) - INTERVAL ? * 1000 MICROSECOND'}`;
  return {
    sql: `WITH announced AS ${dialect === 'postgres' ? 'MATERIALIZED ' : ''}(
       SELECT e.operation_id, e.task_id, e.type,
              (SELECT COUNT(*) FROM tasks t
                WHERE t.id = e.task_id AND t.lifecycle_state <> 'deleted' AND t.queued_for_step_id IS NULL) AS launchable
         FROM event_outbox e
        WHERE e.type IN ('task.created', 'task.dependencies_resolved') AND e.delivered_at IS NOT NULL ${window} ${scope}
          AND ${unclaimed('e.operation_id', 'e.task_id')})
     SELECT o.id AS operation_id, o.task_id, s.step_key AS session_id FROM announced e
       JOIN task_creation_operations o ON o.id = e.operation_id AND o.task_id = e.task_id AND o.state = 'completed'
       JOIN task_creation_steps s ON s.operation_id = o.id AND s.kind = 'launch_intent' AND s.state = 'armed'
      WHERE e.launchable = 1 AND (e.type = 'task.dependencies_resolved' OR o.start_policy = 'immediate')
        AND NOT EXISTS (SELECT 1 FROM task_launch_dispatch_claims c WHERE c.creation_operation_id = o.id AND c.session_id = ${dialect === 'postgres' ? 'CAST(s.step_key AS uuid)' : 's.step_key'})
      LIMIT ${SWEEP_LIMIT}`,
    params: [...(launchWindowMs === null ? [] : [launchWindowMs]), ...(workspaceId === undefined ? [] : [workspaceId])],
  };
}

/**
 * Admitted tasks (admitted within the window) whose armed launch has no dispatch claim yet; the window's tasks are
 * read first (ix_tasks_admitted_at), as the announcing events are above.
 */
async function recentAdmissions(db: Db, windowMs: number, workspaceId: string | undefined) {
  const since =
    db.dialect === 'postgres'
      ? "clock_timestamp() - CAST(? AS integer) * interval '1 millisecond'"
      : 'NOW(3) - INTERVAL ? * 1000 MICROSECOND';
  return readRows<{ operation_id: string; task_id: string; session_id: string }>(
    db,
    `WITH admitted AS ${db.dialect === 'postgres' ? 'MATERIALIZED ' : ''}(
       SELECT t.id, t.creation_operation_id FROM tasks t
        WHERE t.admitted_at > ${since} AND t.wip_admitted = ? AND t.lifecycle_state <> 'deleted'
          ${workspaceId === undefined ? '' : 'AND t.workspace_id = ?'}
          AND ${unclaimed('t.creation_operation_id', 't.id')})
     SELECT o.id AS operation_id, o.task_id, s.step_key AS session_id FROM admitted t
       JOIN task_creation_operations o ON o.id = t.creation_operation_id AND o.state = 'completed'
       JOIN task_creation_steps s ON s.operation_id = o.id AND s.kind = 'launch_intent' AND s.state = 'armed'
      WHERE NOT EXISTS (SELECT 1 FROM task_launch_dispatch_claims c WHERE c.creation_operation_id = o.id AND c.session_id = ${db.dialect === 'postgres' ? 'CAST(s.step_key AS uuid)' : 's.step_key'})
      LIMIT ${SWEEP_LIMIT}`,
    [windowMs, true, ...(workspaceId === undefined ? [] : [workspaceId])],
  );
}

export interface RecoveryCandidateQuery {
  limit: number;
  /** An operation none of whose rows changed for this long counts as stalled. */
  quietMs: number;
  workspaceId?: string;
  /** Operations this reaper is backing off from (recovery could not move them); left out of the batch. */
  exclude?: readonly string[];
}

/**
 * Non-terminal operations without a live recovery claim that either need
 * recovery whatever their age — an unfinished external-ID release
 * (`preparing-release`: its apply is idempotent, so racing a live releaser is
 * harmless, and until it runs the creation can make no progress), a step
 * `unknown`, a compensation `required|unknown` or due `retry_wait`, or a
 * permanently failed step (unless a compensation waits for its retry time) —
 * or have stalled: neither the operation nor any of its steps changed for
 * `quietMs` (a live worker renews its lease well within that), so a lost
 * wake-up or an unfinished Complete is picked up without racing the workers
 * that drive healthy creations. Oldest first, at most `limit`.
 */
export async function findRecoveryCandidates(db: Db, q: RecoveryCandidateQuery): Promise<string[]> {
  const pg = db.dialect === 'postgres';
  const now = pg ? 'clock_timestamp()' : 'NOW(3)';
  const quietSince = pg
    ? "clock_timestamp() - (CAST(? AS integer) * interval '1 millisecond')"
    : 'NOW(3) - INTERVAL (? * 1000) MICROSECOND';
  const quiet = Math.max(0, Math.floor(q.quietMs));
  const rows = await readRows<{ id: string }>(
    db,
    `SELECT o.id FROM task_creation_operations o
      WHERE o.state IN ('preparing', 'preparing-release', 'completing')
        ${q.workspaceId === undefined ? '' : 'AND o.workspace_id = ?'}
        ${q.exclude && q.exclude.length > 0 ? `AND o.id NOT IN (${q.exclude.map(() => '?').join(', ')})` : ''}
        AND (o.recovery_lease_expires_at IS NULL OR o.recovery_lease_expires_at <= ${now})
        AND (
          o.state = 'preparing-release'
          OR EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND (
                    (s.state = 'unknown' AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= ${now}))
                    OR s.compensation_state IN ('required', 'unknown')
                    OR (s.compensation_state = 'retry_wait' AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= ${now}))))
          OR (EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.state = 'failed')
              AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id
                                AND s.compensation_state = 'retry_wait' AND s.next_attempt_at > ${now}))
          OR (o.updated_at <= ${quietSince}
              AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.updated_at > ${quietSince})
              AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.state = 'unknown'
                                AND s.next_attempt_at > ${now}))
        )
      ORDER BY o.updated_at LIMIT ${Math.max(1, Math.floor(q.limit))}`,
    [...(q.workspaceId === undefined ? [] : [q.workspaceId]), ...(q.exclude ?? []), quiet, quiet],
  );
  return rows.map((r) => r.id);
}
