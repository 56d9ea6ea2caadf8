/**
 * Delivers a workspace's outbox events in sequence order. Delivery hands the
 * event to the sinks (outside any transaction: for `task.created` of an
 * immediate start, the launch wake-up; for `task.dependencies_resolved` of a
 * deferred start, its promotion to a session/launch pair, then the same
 * launch wake-up), then marks it delivered with a
 * compare-and-set, so each event ID is marked delivered exactly once; sinks
 * are idempotent (launch job IDs and dispatch claims collapse repeats).
 * Called in place after a Complete (`launchInPlace`), the launch runs right
 * here instead of one BullMQ hop; if it throws, its wake-up is queued before
 * the event is marked, exactly as without it.
 */
import { launchJobId, LAUNCH_QUEUE, type LaunchJob, type OutboxJob } from '../../queues/names';
import { parseCanonical } from '../canonical/canonical-json';
import { TIER } from '../db/lock-plan';
import { execOnce, readRows, runTransaction, type Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { QueueSet } from '../coordinator/queues';
import { isTaskLedgerError } from '../domain/errors';
import { promoteDeferredLaunch, type PromotionResult } from '../store/deferred-launch';
import type { DispatchClaim } from '../store/launch-dispatch';
import {
  INTENT_COLUMNS,
  INTENT_JOIN,
  markDeliveredStatement,
  inEventOrder,
  operationEventsStatement,
  OUTBOX_READ_BATCH,
  type OperationEventRow,
  type OutboxMark,
} from '../store/outbox-mark';

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
  /** Extra in-process subscribers (tests, demo progress): told of each event this process delivers. */
  subscribers?: ((event: OutboxEvent) => void)[];
}

/** The typed refusals of a promotion that retrying cannot change: the operation's rows contradict its plan. */
const LEDGER_REFUSALS: ReadonlySet<string> = new Set([
  'evidence_mismatch',
  'creation_state_conflict',
  'handle_mismatch',
  'invalid_document',
  'not_found',
]);

/** The actor a promotion names (the operation row's actor checks need one; any dispatcher may promote). */
const PROMOTION_ACTOR = 'outbox-dispatcher';

/** Dispatch claim states a launch wake-up can still claim (store/launch-dispatch.ts refuses every other). */
const CLAIMABLE: ReadonlySet<string> = new Set(['planned', 'retry_wait']);

type IntentRow = Pick<OperationEventRow, 'delivered_at' | 'step_key' | 'dispatch_state'>;

const BATCH = OUTBOX_READ_BATCH;

export interface DeliveryOptions {
  /**
   * Run an immediate start's launch in this process (a process that also runs the launch role); `mark`, when
   * given, is the delivered event, marked with the launch record (`recordLaunchDispatch`).
   */
  launchInPlace?: (job: LaunchJob, mark?: OutboxMark, taken?: DispatchClaim) => Promise<unknown>;
  /**
   * The dispatch claim this process's phase B took for the operation's launch (ADR 0019): its intent is launched
   * in place under it, though the claim already reads `running`.
   */
  taken?: DispatchClaim;
}

/** A delivery's outcome: done (true; `marked` when its launch already marked it), nothing to do (false), held. */
type Delivery = boolean | 'held' | 'marked';

/**
 * Delivers one event; returns false, having done nothing, when it is a launch
 * event that another dispatcher (another process's pass over the same
 * workspace) marked delivered after this pass read its batch. That check
 * shares its round trip with the launch intents' read; any other event's
 * delivery is only the subscribers, and a repeat costs no more than the check.
 *
 * `held`: a deferred start whose promotion the ledger refused with a
 * contradiction (rows that do not match their plan). The event is not
 * delivered — delivering it would consume the start — and stays for the next
 * pass (its `delivery_attempts` counts the tries; the workspace's event feed,
 * which never skips an undelivered event, waits at it, and `taskledger
 * verify` reports it). A promotion that has nothing left to launch (the task
 * is done or deleted, the workspace is being deleted) consumes the event.
 */
async function deliver(
  deps: OutboxDeps,
  event: OutboxEvent,
  options: DeliveryOptions,
  /** The event's armed intents as read just now with the event itself (a pass over one operation's events). */
  fresh?: IntentRow[],
): Promise<Delivery> {
  let markedByLaunch = false;
  const immediate = event.type === 'task.created' && event.payload.start_policy === 'immediate';
  const unblocked = event.type === 'task.dependencies_resolved' && event.payload.start_policy === 'deferred';
  if (unblocked) {
    // Idempotent: a repeated delivery finds the pair already there. A refusal (the task is no longer live, or
    // its profile resolved no launch) leaves no intent, so nothing launches below.
    let promotion: PromotionResult;
    try {
      promotion = await promoteDeferredLaunch(deps.db, event.operation_id, PROMOTION_ACTOR);
    } catch (err) {
      // A ledger that refuses this operation (rows that do not match their plan) must not hold up the workspace's
      // other launches, nor consume this start: the event stays undelivered and is tried again by the next pass.
      // Anything else (a transient failure, a bug such as a lock-order violation) throws, and the pass is retried.
      if (!isTaskLedgerError(err) || !LEDGER_REFUSALS.has(err.code)) throw err;
      deps.log.error(
        { err, operation_id: event.operation_id, event_id: event.event_id },
        'deferred start refused by the ledger: its event is held undelivered (docs/recovery.md)',
      );
      deps.metrics?.jobsSkipped.inc({ queue: 'outbox', reason: err.code });
      return 'held';
    }
    if ('refused' in promotion) {
      // Nothing left to launch (the task is no longer live, the workspace is being deleted): the event is consumed.
      deps.log.info({ operation_id: event.operation_id, reason: promotion.refused }, 'deferred start not promoted');
    }
  }
  if (immediate || unblocked) {
    // With each armed intent, the state of its dispatch claim if one exists: a claim past `planned`/`retry_wait` is
    // being launched (or was) by whoever took it — the claim a wake-up would make refuses exactly then — and its
    // recovery is the dispatch claim's (the reaper's dispatch pass), so this pass leaves it alone. Two processes'
    // passes over one workspace overlap; this keeps the second from taking a claim transaction only to be refused.
    // A promotion above may have armed an intent since the event was read: only an immediate start's read stands.
    const rows =
      fresh !== undefined && immediate
        ? fresh
        : await readRows<IntentRow>(
            deps.db,
            `SELECT e.delivered_at, ${INTENT_COLUMNS} ${INTENT_JOIN} WHERE e.event_id = ?`,
            [event.event_id],
          );
    if (rows.length === 0 || rows[0]!.delivered_at !== null) return false;
    // The first launch run in place marks the event with its record (one commit fewer); any other path marks it here.
    let mark: OutboxMark | undefined = { eventId: event.event_id, marked: false };
    for (const intent of rows) {
      if (intent.step_key === null) continue;
      const taken =
        options.taken?.operationId === event.operation_id && options.taken.sessionId === intent.step_key
          ? options.taken
          : undefined;
      if (!taken && intent.dispatch_state !== null && !CLAIMABLE.has(intent.dispatch_state)) continue;
      const job: LaunchJob = { operationId: event.operation_id, taskId: event.task_id, sessionId: intent.step_key };
      if (options.launchInPlace) {
        try {
          await options.launchInPlace(job, mark, taken);
          if (mark?.marked) markedByLaunch = true;
          mark = undefined;
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
  return markedByLaunch ? 'marked' : true;
}

export async function processOutboxJob(
  deps: OutboxDeps,
  job: OutboxJob,
  options: DeliveryOptions = {},
  /**
   * A pass over one operation's events right after its phase B: the rows phase B read at the end of its COMMIT's
   * round trip (`operationEventsStatement`), so this pass need not read them again.
   */
  prefetched?: OperationEventRow[],
): Promise<number> {
  let delivered = 0;
  // Past the events this pass already handled (a held one stays undelivered: the next read must not return it).
  let after: string | null = null;
  // A pass over one operation's events (right after its Complete) reads each event's armed intents with it: one
  // round trip instead of two. Only the first event's are used — they are as fresh as a read right before it.
  if (job.operationId !== undefined) {
    const read = operationEventsStatement(deps.db.dialect, job.workspaceId, job.operationId);
    const rows = prefetched ?? inEventOrder(await readRows<OperationEventRow>(deps.db, read.sql, [...read.params]));
    const first = rows[0];
    if (first === undefined) return 0;
    const intents = rows.filter((r) => r.event_id === first.event_id);
    // A first event with more intents than one read holds, or other events after it: the general pass does the rest.
    if (intents.length < BATCH) {
      const event = toEvent(first);
      delivered += await settle(deps, event, await deliver(deps, event, options, intents));
      after = String(first.seq);
      if (rows.every((r) => r.event_id === first.event_id)) return delivered;
    }
  }
  for (;;) {
    const scope = job.operationId === undefined ? '' : 'AND operation_id = ?';
    const rows: (Omit<OutboxEvent, 'payload'> & { payload_json: string })[] = await readRows(
      deps.db,
      `SELECT seq, event_id, type, task_id, operation_id, revision, payload_json FROM event_outbox
        WHERE workspace_id = ? ${scope} AND delivered_at IS NULL ${after === null ? '' : 'AND seq > ?'}
        ORDER BY seq LIMIT ${BATCH}`,
      [
        job.workspaceId,
        ...(job.operationId === undefined ? [] : [job.operationId]),
        ...(after === null ? [] : [after]),
      ],
    );
    if (rows.length > 0) after = String(rows[rows.length - 1]!.seq);
    if (rows.length === 0) return delivered;
    for (const row of rows) {
      const event = toEvent(row);
      delivered += await settle(deps, event, await deliver(deps, event, options));
    }
    if (rows.length < BATCH) return delivered;
  }
}

type EventRow = Omit<OutboxEvent, 'payload' | 'seq'> & { seq: string | number; payload_json: string };

function toEvent(row: EventRow): OutboxEvent {
  return {
    seq: String(row.seq),
    event_id: row.event_id,
    type: row.type,
    task_id: row.task_id,
    operation_id: row.operation_id,
    revision: row.revision,
    payload: parseCanonical(row.payload_json) as Record<string, unknown>,
  };
}

/** After a delivery: a held event counts a try; a delivered one is marked unless its launch did (1 when this pass marked it). */
async function settle(deps: OutboxDeps, event: OutboxEvent, outcome: Delivery): Promise<number> {
  if (outcome === 'held') {
    await runTransaction(deps.db, 'NoteOutboxHeld', async (tx) => {
      tx.lockRow(TIER.OUTBOX, 'event_outbox', event.event_id);
      await tx.exec(
        'UPDATE event_outbox SET delivery_attempts = delivery_attempts + 1 WHERE event_id = ? AND delivered_at IS NULL',
        [event.event_id],
      );
    });
    return 0;
  }
  if (!outcome) return 0;
  if (outcome === 'marked') {
    deps.metrics?.outboxDelivered.inc({ type: event.type });
    return 1;
  }
  // One autocommit statement on the event's own row (outbox 16, nothing else locked): one round trip.
  const mark = markDeliveredStatement(deps.db.dialect, event.event_id);
  const marked = await execOnce(deps.db, 'MarkOutboxDelivered', mark.sql, [...mark.params]);
  if (marked !== 1) return 0;
  deps.metrics?.outboxDelivered.inc({ type: event.type });
  return 1;
}
