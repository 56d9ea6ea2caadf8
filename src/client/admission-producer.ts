/**
 * `AdmissionProducer`: enqueues creation requests onto a fleet's admission
 * queue, for producers that already speak BullMQ (same Redis and queue
 * prefix as the fleet, `TASKLEDGER_QUEUE_PREFIX`, default `taskledger`).
 *
 * `enqueueCreation(request, {jobId?, waitMs?})` adds one job carrying the
 * producer's token ID (the `id` that `POST /workspaces/:id/tokens`
 * returned; the token's secret never goes to Redis) and returns its job ID.
 * The fleet's admission role authorizes and validates it exactly as REST
 * does (src/api/admission.ts). `awaitOutcome(jobId, timeoutMs)` waits for the
 * job through BullMQ `QueueEvents` and returns the REST create answer, or
 * throws `TaskLedgerApiError` with the code the worker recorded on the job
 * (`invalid_request`, `task not created`, `unauthorized`, ...). An answer
 * with `creation_complete: false` is still being created: the job waits
 * only `waitMs`; `TaskLedgerClient.findByExternalId` follows it further.
 */
import { randomUUID } from 'node:crypto';
import { Job, Queue, QueueEvents, type ConnectionOptions } from 'bullmq';
import { ADMISSION_QUEUE, DEFAULT_QUEUE_PREFIX, type AdmissionJob } from '../../queues/names';
import type { CreateTaskAnswer, CreateTaskRequest } from './types';
import { TaskLedgerApiError } from './types';

export interface AdmissionProducerOptions {
  /** ioredis options or an ioredis instance (BullMQ's `connection`). */
  connection: ConnectionOptions;
  /** The fleet's queue prefix (default `taskledger`). */
  prefix?: string;
  /** The ID of the producer's API token (a workspace member or operator token). */
  tokenId: string;
}

export class AdmissionProducer {
  private readonly queue: Queue<AdmissionJob>;
  private events: QueueEvents | null = null;

  constructor(private readonly options: AdmissionProducerOptions) {
    this.queue = new Queue<AdmissionJob>(ADMISSION_QUEUE, {
      connection: options.connection,
      prefix: options.prefix ?? DEFAULT_QUEUE_PREFIX,
    });
  }

  /**
   * Adds the creation request; returns the job ID. A job ID the queue still holds is not added twice (BullMQ), and
   * the same external ID is never created twice (the ledger), so re-sending after a lost `add` is safe.
   */
  async enqueueCreation(
    request: CreateTaskRequest | Record<string, unknown>,
    opts: { jobId?: string; waitMs?: number } = {},
  ): Promise<string> {
    const data: AdmissionJob = { tokenId: this.options.tokenId, body: request };
    if (opts.waitMs !== undefined) data.waitMs = opts.waitMs;
    const job = await this.queue.add('create', data, {
      jobId: opts.jobId ?? `create-${randomUUID()}`,
      // The worker refuses bad input with an unrecoverable error (never retried); kept for the producer to read.
      removeOnComplete: { age: 3600, count: 10_000 },
      removeOnFail: { age: 24 * 3600, count: 10_000 },
    });
    return job.id!;
  }

  /** The job's outcome: the REST create answer, or `TaskLedgerApiError` with the recorded code. */
  async awaitOutcome(jobId: string, timeoutMs = 30_000): Promise<CreateTaskAnswer> {
    const events = await this.queueEvents();
    const job = await Job.fromId<AdmissionJob, CreateTaskAnswer>(this.queue, jobId);
    if (!job) throw new Error(`no admission job ${jobId} (never added, or already removed)`);
    try {
      return await job.waitUntilFinished(events, timeoutMs);
    } catch (err) {
      throw refusal((err as Error).message) ?? err;
    }
  }

  async close(): Promise<void> {
    await this.events?.close();
    await this.queue.close();
  }

  private async queueEvents(): Promise<QueueEvents> {
    if (!this.events) {
      this.events = new QueueEvents(ADMISSION_QUEUE, {
        connection: this.options.connection,
        prefix: this.options.prefix ?? DEFAULT_QUEUE_PREFIX,
      });
      await this.events.waitUntilReady();
    }
    return this.events;
  }
}

/** The worker records a refusal as the JSON REST error body plus `http_status` (src/api/admission.ts). */
function refusal(failedReason: string): TaskLedgerApiError | null {
  try {
    const body = JSON.parse(failedReason) as Record<string, unknown>;
    if (typeof body.error !== 'string' || typeof body.http_status !== 'number') return null;
    return new TaskLedgerApiError(body.http_status, body.error, body);
  } catch {
    return null;
  }
}
