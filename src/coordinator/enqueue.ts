/**
 * Sends the wake-ups an operation needs now, read from the ledger (plain
 * reads, no transaction): one job per runnable step on its kind's queue
 * (`planned`, or `retry_wait` delayed until `next_attempt_at`; the launch
 * intent only once every other step succeeded), and a Complete job when the
 * Complete predicate looks satisfied or phase B is unfinished. Job IDs come
 * from step ID and generation, so calling this twice enqueues nothing new.
 *
 * Steps whose effect lives only in the ledger (LEDGER_ONLY_KINDS) due now
 * share one wake-up: only the first is sent, and the worker that runs it runs
 * the others in turn (inline, or by calling this again when it is done), each
 * in its own one-transaction claim. A crash in between leaves the rest
 * `planned` for the next call or the sweep. That wake-up also stands for the
 * operation's `planned` steps whose effect is outside the ledger (Git,
 * providers): the batch claims them with itself and its worker performs them
 * (ADR 0040); a worker that does not perform a kind leaves it `planned`, and
 * the call after its batch, finding no ledger step due, sends it its own job. Right after Begin,
 * `enqueuePlanned` sends the same first wake-ups from the rows Begin wrote.
 */
import {
  completeJobId,
  COMPLETE_QUEUE,
  stepJobId,
  type CompleteJob,
  type OperationHint,
  type StepJob,
} from '../../queues/names';
import { readRows, type Db } from '../db/tx';
import { LEDGER_ONLY_KINDS, type StepKind } from '../domain/vocab';
import type { PlannedStep } from '../store/types';
import { addWakeup, type QueueSet } from './queues';

interface RunnableRow {
  id: string;
  kind: StepKind;
  step_key: string;
  state: string;
  generation: number;
  compensation_state: string;
  delay_ms: number | string | null;
}

function delaySql(db: Db): string {
  return db.dialect === 'postgres'
    ? 'GREATEST(0, CAST(EXTRACT(EPOCH FROM (s.next_attempt_at - clock_timestamp())) * 1000 AS bigint))'
    : 'GREATEST(0, TIMESTAMPDIFF(MICROSECOND, NOW(3), s.next_attempt_at) DIV 1000)';
}

export interface EnqueueSummary {
  steps: number;
  complete: boolean;
  /** Due steps handed back to the caller instead of being enqueued (`options.keep`). */
  kept: StepJob[];
  /** Complete is due but was handed back to the caller (`options.keepComplete`). */
  completeKept: boolean;
}

export interface EnqueueOptions {
  /** Due steps the caller runs itself, in this process, instead of a BullMQ hop. */
  keep?: (step: StepJob) => boolean;
  /** The caller runs a due Complete itself. */
  keepComplete?: boolean;
  /** Recovery re-sends: a failed job holding the same ID is removed first (`addWakeup`). */
  replaceFailed?: boolean;
  /** Sent with each step wake-up (the first ones, from Begin's result): ADR 0020. */
  hint?: OperationHint;
}

export async function enqueueRunnable(
  db: Db,
  queues: QueueSet,
  operationId: string,
  options: EnqueueOptions = {},
): Promise<EnqueueSummary> {
  // One read (the operation's state and its steps, one snapshot): this runs after every step of every creation.
  const rows = await readRows<{ op_state: string } & { [K in keyof RunnableRow]: RunnableRow[K] | null }>(
    db,
    `SELECT o.state AS op_state, s.id, s.kind, s.step_key, s.state, s.generation, s.compensation_state, ${delaySql(db)} AS delay_ms
       FROM task_creation_operations o LEFT JOIN task_creation_steps s ON s.operation_id = o.id
      WHERE o.id = ?`,
    [operationId],
  );
  const steps = rows.filter((r): r is typeof r & RunnableRow => r.id !== null);
  return sendRunnable(queues, operationId, rows[0]?.op_state, steps, options);
}

/**
 * The first wake-ups of a creation Begin just committed, from the step rows it
 * inserted (all `planned`, generation 0, nothing to compensate): the same jobs
 * and job IDs `enqueueRunnable` would send after reading them back, without
 * the read.
 */
export async function enqueuePlanned(
  queues: QueueSet,
  operationId: string,
  planned: readonly PlannedStep[],
  /** What Begin knew of the operation, sent with each wake-up (ADR 0020). */
  hint?: OperationHint,
): Promise<EnqueueSummary> {
  const steps: RunnableRow[] = planned.map((s) => ({
    ...s,
    state: 'planned',
    generation: 0,
    compensation_state: 'none',
    delay_ms: 0,
  }));
  return sendRunnable(queues, operationId, 'preparing', steps, { hint });
}

async function sendRunnable(
  queues: QueueSet,
  operationId: string,
  state: string | null | undefined,
  rows: readonly RunnableRow[],
  options: EnqueueOptions,
): Promise<EnqueueSummary> {
  const wakeComplete = () =>
    addWakeup(
      queues.get(COMPLETE_QUEUE),
      'complete',
      { operationId } satisfies CompleteJob,
      { jobId: completeJobId(operationId) },
      options.replaceFailed ?? false,
    );
  const none: EnqueueSummary = { steps: 0, complete: false, kept: [], completeKept: false };
  if (state === 'completing') {
    await wakeComplete();
    return { ...none, complete: true };
  }
  if (state !== 'preparing') return none;
  // One order for every caller (the plan's rows and a read of the ledger come in different orders), so the shared
  // ledger-only wake-up always names the same step and its job ID deduplicates.
  const steps = [...rows].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  if (steps.some((s) => s.state === 'failed' || s.compensation_state !== 'none')) return none;
  const others = steps.filter((s) => s.kind !== 'launch_intent');
  const othersDone = others.every((s) => s.state === 'succeeded');
  const due = steps.filter(
    (s) => (s.state === 'planned' || s.state === 'retry_wait') && (s.kind !== 'launch_intent' || othersDone),
  );
  const kept: StepJob[] = [];
  const sends: Promise<unknown>[] = [];
  let ledgerWake = false;
  let coalesced = 0;
  const delayOf = (s: RunnableRow) => (s.state === 'retry_wait' ? Number(s.delay_ms ?? 0) : 0);
  // A ledger wake-up due now: its batch also claims the operation's first-attempt effect steps (ADR 0040).
  const ledgerDue = due.some((s) => LEDGER_ONLY_KINDS.has(s.kind) && delayOf(s) === 0);
  for (const s of due) {
    const job: StepJob = {
      operationId,
      stepId: s.id,
      kind: s.kind,
      stepKey: s.step_key,
      generation: Number(s.generation),
      ...(options.hint ? { hint: options.hint } : {}),
    };
    const delay = delayOf(s);
    if (ledgerDue && s.state === 'planned' && !LEDGER_ONLY_KINDS.has(s.kind)) coalesced++;
    else if (delay === 0 && options.keep?.(job)) kept.push(job);
    else if (delay === 0 && LEDGER_ONLY_KINDS.has(s.kind) && ledgerWake) coalesced++;
    else {
      if (delay === 0 && LEDGER_ONLY_KINDS.has(s.kind)) ledgerWake = true;
      const opts = { jobId: stepJobId(s.id, job.generation), delay };
      sends.push(addWakeup(queues.step(s.kind), s.kind, job, opts, options.replaceFailed ?? false));
    }
  }
  // Independent wake-ups: sent together, one Redis round trip of latency instead of one per step.
  await Promise.all(sends);
  const sent = due.length - kept.length - coalesced;
  const launch = steps.filter((s) => s.kind === 'launch_intent');
  const ready = othersDone && launch.every((s) => s.state === 'armed');
  if (ready && options.keepComplete) return { steps: sent, complete: false, kept, completeKept: true };
  if (ready) {
    await wakeComplete();
  }
  return { steps: sent, complete: ready, kept, completeKept: false };
}
