/**
 * The producer side of every BullMQ queue, under one prefix (several fleets
 * can share a Redis). Jobs are wake-ups that carry IDs: they never retry on
 * their own (attempts 1) because the ledger, not BullMQ, decides what runs
 * again; finished jobs are removed so a later wake-up with the same job ID is
 * accepted.
 */
import { Queue, type JobsOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import { ALL_QUEUE_NAMES, stepQueueName } from '../../queues/names';
import type { StepKind } from '../domain/vocab';
import { CreationEvents } from './creation-events';

export const WAKEUP_JOB_OPTIONS: JobsOptions = {
  attempts: 1,
  removeOnComplete: true,
  removeOnFail: { count: 1000 },
};

/**
 * Adds a wake-up under its derived job ID. A job that ended `failed` keeps its
 * ID (`removeOnFail` keeps the last 1000 for the dashboard), and BullMQ
 * ignores an add for an ID that exists, so a wake-up re-sent by recovery
 * (`replaceFailed`) first removes a failed job of the same ID; the ledger, not
 * the failed job, says the work is due. The hot path sends fresh IDs and
 * skips that lookup.
 */
export async function addWakeup(
  queue: Queue,
  name: string,
  data: unknown,
  opts: JobsOptions & { jobId: string },
  replaceFailed: boolean,
): Promise<void> {
  if (replaceFailed) {
    const previous = await queue.getJob(opts.jobId);
    if (previous && (await previous.isFailed())) await previous.remove();
  }
  await queue.add(name, data, opts);
}

export class QueueSet {
  private readonly queues = new Map<string, Queue>();
  /** "Creation ended" wake-ups for waiting create requests, on this prefix's channel. */
  readonly creationEvents: CreationEvents;

  constructor(
    readonly connection: Redis,
    readonly prefix: string,
  ) {
    for (const name of ALL_QUEUE_NAMES) {
      this.queues.set(name, new Queue(name, { connection, prefix, defaultJobOptions: WAKEUP_JOB_OPTIONS }));
    }
    this.creationEvents = new CreationEvents(connection, `${prefix}:creation-ended`);
  }

  get(name: string): Queue {
    const q = this.queues.get(name);
    if (!q) throw new Error(`unknown queue ${name}`);
    return q;
  }

  step(kind: StepKind): Queue {
    return this.get(stepQueueName(kind));
  }

  all(): Queue[] {
    return [...this.queues.values()];
  }

  async close(): Promise<void> {
    this.creationEvents.close();
    await Promise.all(this.all().map((q) => q.close()));
  }
}
