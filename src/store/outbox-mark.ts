/**
 * Marking an outbox event delivered: a compare-and-set on its own row
 * (outbox 16), so each event ID is marked exactly once whoever delivers it.
 * Sent alone by the dispatcher after a delivery (src/outbox/dispatcher.ts),
 * or with the launch record when the delivery ran the launch in place
 * (`recordLaunchDispatch`, src/store/launch-dispatch.ts). Affects 1 row when
 * this statement marked it, 0 when it was already marked.
 */
import type { Dialect } from '../db/config';
import { nowSql } from '../db/dialect';
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
