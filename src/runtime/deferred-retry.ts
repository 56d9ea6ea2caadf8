/**
 * Deferred starts whose `task.dependencies_resolved` was delivered but whose
 * promotion never happened (the dispatcher's promotion was refused, or the
 * process died between the delivery mark and the promotion's commit): the
 * reaper's sweep promotes them again (PromoteDeferredLaunch, one transaction,
 * idempotent) and wakes their launch. So the start is not consumed with its
 * event: it stays visible (a warn line, `taskledger verify`'s "delivered but
 * never promoted") and retryable until it promotes. A refusal backs off for a
 * while (the caller's back-off map), so a start the ledger keeps refusing
 * does not cost a transaction every sweep.
 */
import { LAUNCH_QUEUE, launchJobId } from '../../queues/names';
import { addWakeup, type QueueSet } from '../coordinator/queues';
import { readRows, type Db, type SqlParam } from '../db/tx';
import { isTaskLedgerError, isTransientError } from '../domain/errors';
import type { Logger } from '../log';
import { promoteDeferredLaunch } from '../store/deferred-launch';

/** Why 200: a sweep's work stays bounded; the next sweep continues. */
const LIMIT = 200;
/** Why 5 minutes: a refusal means rows that contradict their plan, which no immediate retry changes. */
const REFUSAL_BACKOFF_MS = 5 * 60_000;

export interface DeferredRetryDeps {
  db: Db;
  queues: QueueSet | null;
  log: Logger;
  actor: string;
  workspaceId?: string;
  /** Operation id -> time (ms) until which a refused promotion is left alone. */
  backoff: Map<string, number>;
}

/**
 * Driven from the window's delivered `task.dependencies_resolved` events, read first as a materialized set (as the
 * launch sweep's announced events are, runtime/sweep.ts), each event's operation, workspace and task looked up by
 * their keys alone in scalar subqueries and compared after: left to a join, PostgreSQL's planner on fresh tables
 * (no statistics yet) took `state = 'completed'` for selective and read every completed operation, once per event
 * (1,100 buffers, 24 ms a sweep at 2,600 creations; it grew with the ledger's history, not with the window).
 */
export function unpromotedStartsStatement(
  dialect: Db['dialect'],
  options: { workspaceId?: string; windowMs: number | null },
): { sql: string; params: SqlParam[] } {
  const since =
    dialect === 'postgres'
      ? "clock_timestamp() - CAST(? AS integer) * interval '1 millisecond'"
      : 'NOW(3) - INTERVAL ? * 1000 MICROSECOND';
  return {
    sql: `WITH resolved AS ${dialect === 'postgres' ? 'MATERIALIZED ' : ''}(
       SELECT e.operation_id, e.task_id,
              (SELECT CONCAT(o.state, ' ', o.start_policy, ' ', w.state) FROM task_creation_operations o
                 JOIN workspaces w ON w.id = o.workspace_id
                WHERE o.id = e.operation_id AND o.task_id = e.task_id) AS operation,
              (SELECT t.lifecycle_state FROM tasks t WHERE t.id = e.task_id) AS task
         FROM event_outbox e
        WHERE e.type = 'task.dependencies_resolved' AND e.delivered_at IS NOT NULL
          ${options.windowMs === null ? '' : `AND e.delivered_at > ${since}`}
          ${options.workspaceId === undefined ? '' : 'AND e.workspace_id = ?'})
     SELECT r.operation_id, r.task_id FROM resolved r
      WHERE r.operation = 'completed deferred active' AND r.task = 'live'
        AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = r.operation_id AND s.kind = 'launch_intent')
      LIMIT ${LIMIT}`,
    params: [
      ...(options.windowMs === null ? [] : [options.windowMs]),
      ...(options.workspaceId === undefined ? [] : [options.workspaceId]),
    ],
  };
}

export async function findUnpromotedStarts(
  db: Db,
  options: { workspaceId?: string; windowMs: number | null },
): Promise<{ operation_id: string; task_id: string }[]> {
  const st = unpromotedStartsStatement(db.dialect, options);
  return readRows(db, st.sql, st.params);
}

export async function retryUnpromotedStarts(
  deps: DeferredRetryDeps,
  windowMs: number | null,
): Promise<{ promoted: number; refused: number }> {
  const out = { promoted: 0, refused: 0 };
  const now = Date.now();
  for (const [id, until] of deps.backoff) if (until <= now) deps.backoff.delete(id);
  for (const s of await findUnpromotedStarts(deps.db, { workspaceId: deps.workspaceId, windowMs })) {
    if (deps.backoff.has(s.operation_id)) continue;
    const log = deps.log.child({ operation_id: s.operation_id, task_id: s.task_id });
    let reason: string;
    try {
      const r = await promoteDeferredLaunch(deps.db, s.operation_id, deps.actor);
      if ('sessionId' in r) {
        out.promoted++;
        log.warn('a delivered deferred start was not promoted; promoted it now');
        if (deps.queues) {
          await addWakeup(
            deps.queues.get(LAUNCH_QUEUE),
            'launch',
            { operationId: s.operation_id, taskId: s.task_id, sessionId: r.sessionId },
            { jobId: launchJobId(s.operation_id, r.sessionId) },
            true,
          );
        }
        continue;
      }
      reason = r.refused;
    } catch (err) {
      if (!isTaskLedgerError(err)) throw err;
      // A database fault is not a refusal: the next sweep asks again, without a back-off.
      if (isTransientError(err)) {
        log.warn({ code: err.code, detail: err.message }, 'deferred start promotion met a database fault; next sweep');
        continue;
      }
      reason = `${err.code}: ${err.message}`;
    }
    out.refused++;
    deps.backoff.set(s.operation_id, now + REFUSAL_BACKOFF_MS);
    log.warn({ reason }, 'a delivered deferred start cannot be promoted; it waits for an operator (docs/recovery.md)');
  }
  return out;
}
