/**
 * Marking an outbox event delivered: a compare-and-set on its own row
 * (outbox 16), so each event ID is marked exactly once whoever delivers it.
 * Sent alone by the dispatcher after a delivery (src/outbox/dispatcher.ts),
 * or with the launch record when the delivery ran the launch in place
 * (`recordLaunchDispatch`, src/store/launch-record.ts). Affects 1 row when
 * this statement marked it, 0 when it was already marked.
 */
import type { Dialect } from '../db/config';
import { forceIndexSql, nowSql } from '../db/dialect';
import type { Statement } from '../db/tx';

export function markDeliveredStatement(dialect: Dialect, eventId: string): Statement {
  return {
    sql: `UPDATE event_outbox SET delivered_at = ${nowSql(dialect)}, delivery_attempts = delivery_attempts + 1
      WHERE event_id = ? AND delivered_at IS NULL`,
    params: [eventId],
  };
}

/**
 * An outbox event delivered by this launch (the `task.created` whose delivery ran it in place): its mark travels
 * with the launch record. `marked` says, once the record committed, whether this transaction marked it (false:
 * another dispatcher had, or the record did not commit and the caller marks it as usual).
 */
export interface OutboxMark {
  eventId: string;
  marked: boolean;
}

/** One row of `operationEventsStatement`: an undelivered event with one of its armed launch intents. */
export interface OperationEventRow {
  seq: string | number;
  event_id: string;
  type: string;
  task_id: string;
  operation_id: string;
  revision: number;
  payload_json: string;
  delivered_at: Date | null;
  /** The armed launch intent's session (null when the event has none). */
  step_key: string | null;
  /** That launch's dispatch claim state, if a claim exists. */
  dispatch_state: string | null;
}

/** Why 100: one query's worth of events; a busy workspace drains in a few round trips. */
export const OUTBOX_READ_BATCH = 100;

/**
 * An event's armed launch intents (one row with nulls when it has none) and each one's dispatch claim state: at most
 * one claim per intent (`uq_launch_dispatch`: operation, task, session). A join, not a correlated subquery, which
 * MariaDB answers through a subquery cache: a temporary table created at every run (ADR 0047).
 */
export const INTENT_COLUMNS = `s.step_key, c.state AS dispatch_state`;
const INTENT_LEFT_JOIN = `LEFT JOIN task_creation_steps s
    ON s.operation_id = e.operation_id AND s.kind = 'launch_intent' AND s.state = 'armed'
  LEFT JOIN task_launch_dispatch_claims c
    ON c.creation_operation_id = e.operation_id AND c.task_id = e.task_id AND CAST(c.session_id AS CHAR(36)) = s.step_key`;
export const INTENT_JOIN = `FROM event_outbox e ${INTENT_LEFT_JOIN}`;

/**
 * One operation's undelivered events with their armed intents (`OperationEventRow`): what the delivery pass right
 * after its Complete reads — or what phase B reads at the end of its own COMMIT's round trip and hands to that
 * pass (a plain read: it takes no lock). Put its rows through `inEventOrder`.
 *
 * Ordered by `e.seq` alone, on the operation's index: the server then reads the events in order and joins each
 * one's intents, with no sort. Ordering by the joined `s.step_key` too made MariaDB sort the join in a temporary
 * table, which the event's `payload_json` (a TEXT) sent to disk: a file created and dropped per creation, the
 * costliest statement of phase B there. The intents of one event are put in order here instead.
 */
export function operationEventsStatement(dialect: Dialect, workspaceId: string, operationId: string): Statement {
  return {
    sql: `SELECT e.seq, e.event_id, e.type, e.task_id, e.operation_id, e.revision, e.payload_json, e.delivered_at,
              ${INTENT_COLUMNS}
         FROM event_outbox e ${forceIndexSql(dialect, 'ix_event_outbox_operation_workspace_seq')}
         ${INTENT_LEFT_JOIN}
        WHERE e.workspace_id = ? AND e.operation_id = ? AND e.delivered_at IS NULL
        ORDER BY e.seq LIMIT ${OUTBOX_READ_BATCH}`,
    params: [workspaceId, operationId],
  };
}

/** `operationEventsStatement`'s rows in event order, and each event's intents in session order (stable). */
export function inEventOrder(rows: readonly OperationEventRow[]): OperationEventRow[] {
  const seq = (r: OperationEventRow) => BigInt(r.seq);
  return [...rows].sort((a, b) => {
    const bySeq = seq(a) - seq(b);
    if (bySeq !== 0n) return bySeq < 0n ? -1 : 1;
    const x = a.step_key ?? '';
    const y = b.step_key ?? '';
    return x < y ? -1 : x > y ? 1 : 0;
  });
}
