/**
 * Wakes a workspace's outbox dispatcher after a commit that wrote events
 * (Complete's phase B, MarkTaskDone). A process that runs the outbox role
 * delivers in place (`dispatchInPlace`, ADR 0007); if that throws, or without
 * it, one dispatcher job is queued. A crash before either is healed by the
 * reaper's sweep, which wakes a dispatcher for every workspace with
 * undelivered events.
 */
import { OUTBOX_QUEUE, type OutboxJob } from '../../queues/names';
import type { Logger } from '../log';
import type { QueueSet } from './queues';
import type { OperationEventRow } from '../store/outbox-mark';
import type { DispatchClaim } from '../store/launch-dispatch';

export interface OutboxWaker {
  queues: QueueSet;
  log: Logger;
  /**
   * Deliver in this process; throws only for what a queued dispatcher would retry. With an operation, only that
   * creation's events (the pass right after its own Complete: two processes completing creations of one workspace
   * no longer both walk its whole backlog).
   */
  dispatchInPlace?: (
    workspaceId: string,
    operationId?: string,
    prefetched?: OperationEventRow[],
    taken?: DispatchClaim,
  ) => Promise<unknown>;
}

export async function wakeOutbox(
  w: OutboxWaker,
  workspaceId: string,
  operationId?: string,
  /** That operation's events as its phase B read them (`CompleteResult.events`): the pass need not read them. */
  prefetched?: OperationEventRow[],
  /** The launch claim that phase B took for this process (ADR 0019); a queued pass leaves it to its lease. */
  taken?: DispatchClaim,
): Promise<void> {
  if (w.dispatchInPlace) {
    try {
      await w.dispatchInPlace(workspaceId, operationId, prefetched, taken);
      return;
    } catch (err) {
      w.log.warn({ err, workspace_id: workspaceId }, 'in-place outbox delivery failed; waking a dispatcher');
    }
  }
  await w.queues.get(OUTBOX_QUEUE).add('dispatch', { workspaceId } satisfies OutboxJob, {
    jobId: `outbox-${workspaceId}-${Date.now()}`,
  });
}
