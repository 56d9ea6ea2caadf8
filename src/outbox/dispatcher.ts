/**
 * Delivers a workspace's outbox events in sequence order. Delivery hands the
 * event to the sinks (outside any transaction: for `task.created` of an
 * immediate start, the launch wake-up), then marks it delivered with a
 * compare-and-set, so each event ID is marked delivered exactly once; sinks
 * are idempotent (launch job IDs and dispatch claims collapse repeats).
 * Called in place after a Complete (`launchInPlace`), the launch runs right
 * here instead of one BullMQ hop; if it throws, its wake-up is queued before
 * the event is marked, exactly as without it.
 */
import { launchJobId, LAUNCH_QUEUE, type LaunchJob, type OutboxJob } from '../../queues/names';
import { parseCanonical } from '../canonical/canonical-json';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { QueueSet } from '../coordinator/queues';

export interface OutboxEvent {
  seq: string;
  event_id: string;
  type: string;
  task_id: string;
  operation_id: string;
  revision: number;
  payload: Record<string, unknown>;
}

export interface OutboxDeps {
  db: Db;
  queues: QueueSet;
  log: Logger;
  metrics: Metrics | null;
  /** Extra in-process subscribers (tests, demo progress). */
  subscribers?: ((event: OutboxEvent) => void)[];
}

/** Why 100: one query's worth of events; a busy workspace drains in a few round trips. */
const BATCH = 100;

export interface DeliveryOptions {
  /** Run an immediate start's launch in this process (a process that also runs the launch role). */
  launchInPlace?: (job: LaunchJob) => Promise<unknown>;
}

async function deliver(deps: OutboxDeps, event: OutboxEvent, options: DeliveryOptions): Promise<void> {
  if (event.type === 'task.created' && event.payload.start_policy === 'immediate') {
    const intents = await readRows<{ step_key: string }>(
      deps.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent' AND state = 'armed'",
      [event.operation_id],
    );
    for (const intent of intents) {
      const job: LaunchJob = { operationId: event.operation_id, taskId: event.task_id, sessionId: intent.step_key };
      if (options.launchInPlace) {
        try {
          await options.launchInPlace(job);
          continue;
        } catch (err) {
          deps.log.warn({ err, operation_id: job.operationId }, 'in-place launch failed; queueing its wake-up');
        }
      }
      await deps.queues
        .get(LAUNCH_QUEUE)
        .add('launch', job, { jobId: launchJobId(event.operation_id, intent.step_key) });
    }
  }
  for (const s of deps.subscribers ?? []) s(event);
}

export async function processOutboxJob(
  deps: OutboxDeps,
  job: OutboxJob,
  options: DeliveryOptions = {},
): Promise<number> {
  let delivered = 0;
  for (;;) {
    const rows = await readRows<Omit<OutboxEvent, 'payload'> & { payload_json: string }>(
      deps.db,
      `SELECT seq, event_id, type, task_id, operation_id, revision, payload_json FROM event_outbox
        WHERE workspace_id = ? AND delivered_at IS NULL ORDER BY seq LIMIT ${BATCH}`,
      [job.workspaceId],
    );
    if (rows.length === 0) return delivered;
    for (const row of rows) {
      const event: OutboxEvent = {
        ...row,
        seq: String(row.seq),
        payload: parseCanonical(row.payload_json) as Record<string, unknown>,
      };
      await deliver(deps, event, options);
      const marked = await runTransaction(deps.db, 'MarkOutboxDelivered', async (tx) => {
        tx.lockRow(TIER.OUTBOX, 'event_outbox', event.event_id);
        return tx.exec(
          `UPDATE event_outbox SET delivered_at = ${tx.now}, delivery_attempts = delivery_attempts + 1 WHERE event_id = ? AND delivered_at IS NULL`,
          [event.event_id],
        );
      });
      if (marked === 1) {
        delivered++;
        deps.metrics?.outboxDelivered.inc({ type: event.type });
      }
    }
    if (rows.length < BATCH) return delivered;
  }
}
