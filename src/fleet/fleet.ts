/**
 * Starts the selected roles in this process: BullMQ workers for step kinds,
 * Complete, outbox, launch and admission; the reaper's repeatable sweep; the
 * REST API. `stop()` closes workers first (in-flight jobs finish or their
 * leases expire), then queues, Redis and the database pool.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { UnrecoverableError, Worker, type Processor } from 'bullmq';
import type { FastifyInstance } from 'fastify';
import {
  ADMISSION_QUEUE,
  CLEANUP_QUEUE,
  COMPLETE_QUEUE,
  LAUNCH_QUEUE,
  OUTBOX_QUEUE,
  REAPER_QUEUE,
  stepQueueName,
  WORKSPACE_DELETION_JOB,
  workspaceDeletionJobId,
  type WorkspaceDeletionJob,
  type AdmissionJob,
  type CompleteJob,
  type LaunchJob,
  type OutboxJob,
  type StepJob,
} from '../../queues/names';
import type { ApiDeps } from '../api/deps';
import { effectTimeoutWithinLease, type AppConfig } from '../app/config';
import { runDueCleanupJobs } from '../cleanup/worker';
import { processCompleteJob } from '../coordinator/complete-worker';
import { makeCreateTask } from '../coordinator/create';
import { wakeLaunches } from '../coordinator/wake-launches';
import { wakeOutbox } from '../coordinator/wake-outbox';
import { QueueSet } from '../coordinator/queues';
import { processStepJob, type StepHandlers } from '../coordinator/step-worker';
import { createDataSource } from '../db/data-source';
import type { Db } from '../db/tx';
import { STEP_KINDS } from '../domain/vocab';
import { LocalProcessExecutor, type Executor } from '../launch/executor';
import { processLaunchJob } from '../launch/launch-worker';
import type { OperationEventRow, OutboxMark } from '../store/outbox-mark';
import type { DispatchClaim } from '../store/launch-dispatch';
import type { Logger } from '../log';
import { createMetrics, type Metrics } from '../metrics';
import { processOutboxJob, type OutboxEvent } from '../outbox/dispatcher';
import { singleFlight } from '../outbox/single-flight';
import { createProviderRegistry } from '../providers/registry';
import { createRedis } from '../runtime/redis';
import { sweepOnce } from '../runtime/reaper';
import { runWorkspaceDeletion } from '../lifecycle/workspace-deletion-runner';
import { defaultStepHandlers } from '../kinds/registry';
import { CONCURRENCY, type Role } from './roles';
import type { Server } from 'node:http';

export interface FleetOptions {
  config: AppConfig;
  roles: Role[];
  log: Logger;
  handlers?: StepHandlers;
  executor?: Executor;
  metrics?: Metrics;
  subscribers?: ((event: OutboxEvent) => void)[];
  /**
   * Limit the reaper's and the cleanup role's sweeps to one workspace (default: every workspace). A function is
   * asked at each sweep (the demo scopes its fleet to the workspace it creates after the fleet is up).
   */
  sweepWorkspaceId?: string | (() => string | undefined);
  /** Database pool size for this process. */
  poolSize?: number;
}

export interface Fleet {
  db: Db;
  queues: QueueSet;
  metrics: Metrics;
  api: FastifyInstance | null;
  /** `GET /metrics` of a process without the API role, when `TASKLEDGER_METRICS_PORT` is set (metrics-server.ts). */
  metricsServer: Server | null;
  /** The API commands' dependencies (also without the api role: `taskledger mcp` serves stdio from them). */
  apiDeps: ApiDeps;
  workerId: string;
  stop(): Promise<void>;
}

const IO_KINDS = new Set(['fresh_branch_prepare', 'remote_contribution_associate', 'attachment_claim']);

export async function startFleet(opts: FleetOptions): Promise<Fleet> {
  const { config, log } = opts;
  const workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const ds = createDataSource(config.db, { poolSize: opts.poolSize ?? 20 });
  await ds.initialize();
  const db: Db = { ds, dialect: config.db.dialect };
  const connection = createRedis(config.redisUrl);
  const queues = new QueueSet(connection, config.queuePrefix);
  const metrics = opts.metrics ?? createMetrics();
  const effectTimeoutMs = effectTimeoutWithinLease(config);
  const effects = {
    db,
    dataDir: config.dataDir,
    providers: createProviderRegistry({ timeoutMs: effectTimeoutMs }),
    log: log.child({ role: 'steps' }),
    timeoutMs: effectTimeoutMs,
  };
  const handlers = opts.handlers ?? defaultStepHandlers;
  const executor = opts.executor ?? new LocalProcessExecutor(join(config.dataDir, 'runtime'));
  const createTask = makeCreateTask({ db, queues, dataDir: config.dataDir, metrics });
  const workers: Worker[] = [];
  const workerConnections: ReturnType<typeof createRedis>[] = [];
  const worker = <T>(name: string, processor: Processor<T>, concurrency: number) => {
    // Each worker blocks on its own connection; the process owns and closes them.
    const conn = createRedis(config.redisUrl);
    workerConnections.push(conn);
    const w = new Worker<T>(name, processor, { connection: conn, prefix: config.queuePrefix, concurrency });
    w.on('failed', (job, err) => {
      // A refused admission (bad producer input, src/api/admission.ts) is an answer recorded on the job, not a fault.
      if (err instanceof UnrecoverableError)
        log.warn({ queue: name, job_id: job?.id, reason: err.message }, 'job refused');
      else log.error({ queue: name, job_id: job?.id, err }, 'job failed');
    });
    // A worker's own Redis errors (a dropped connection, a command refused) are BullMQ's to retry; without a
    // listener it prints them to stderr itself.
    w.on('error', (err) => log.warn({ queue: name, err: err.message }, 'queue worker error'));
    workers.push(w as Worker);
  };
  const roles = new Set(opts.roles);
  const sweepScope = (): string | undefined =>
    typeof opts.sweepWorkspaceId === 'function' ? opts.sweepWorkspaceId() : opts.sweepWorkspaceId;

  const launchDeps = {
    db,
    executor,
    dataDir: config.dataDir,
    log: log.child({ role: 'launch' }),
    metrics,
    workerId,
    leaseMs: config.leaseMs,
    // A launch that ends without an agent frees its WIP slot: the promoted task's launch is queued (never run
    // inside this launch), and the sweep heals a lost wake-up.
    wakeLaunches: async (taskIds: string[]) => {
      await wakeLaunches({ db, queues, log }, taskIds);
    },
  };
  const outboxDeps = { db, queues, log: log.child({ role: 'outbox' }), metrics, subscribers: opts.subscribers };
  // A process that also runs the outbox role delivers the outbox right after its own Complete, and one that also
  // runs the launch role starts the agent in the same pass: two BullMQ hops fewer per creation. Processes split by
  // role (ecosystem.config.js) keep every hop.
  // Queued deliveries (the reaper's sweep, a failed in-place pass) take the same single-flight pass: one pass per
  // workspace in this process at a time, and the launch in place here too.
  const launchInPlace = roles.has('launch')
    ? (job: LaunchJob, mark?: OutboxMark, taken?: DispatchClaim) => processLaunchJob(launchDeps, job, mark, taken)
    : undefined;
  const workspacePass = singleFlight((workspaceId) => processOutboxJob(outboxDeps, { workspaceId }, { launchInPlace }));
  // Right after a Complete: that creation's events only (no other process walks them at the same time).
  const deliveryPass = (
    workspaceId: string,
    operationId?: string,
    prefetched?: OperationEventRow[],
    taken?: DispatchClaim,
  ) =>
    operationId === undefined
      ? workspacePass(workspaceId)
      : processOutboxJob(outboxDeps, { workspaceId, operationId }, { launchInPlace, taken }, prefetched);
  const completeDeps = {
    db,
    queues,
    log: log.child({ role: 'complete' }),
    metrics,
    workerId,
    dispatchInPlace: roles.has('outbox') ? deliveryPass : undefined,
    // This process starts the agent right after its own phase B: that phase takes the launch's claim (ADR 0019).
    claimant: roles.has('outbox') && roles.has('launch') ? { owner: workerId, leaseMs: config.leaseMs } : undefined,
  };
  // A process that runs both the steps and the complete roles finishes an operation's launch intent and Complete
  // in place once they are its only work left (no BullMQ hop each).
  const inline = roles.has('complete') ? { complete: completeDeps } : undefined;
  if (roles.has('steps')) {
    for (const kind of STEP_KINDS) {
      const stepDeps = {
        effects,
        handlers,
        queues,
        log: log.child({ role: 'steps', kind }),
        metrics,
        workerId,
        leaseMs: config.leaseMs,
        inline,
      };
      worker<StepJob>(
        stepQueueName(kind),
        (job) => processStepJob(stepDeps, job.data, job.id ?? 'unknown'),
        IO_KINDS.has(kind) ? CONCURRENCY.ioStep : CONCURRENCY.dbStep,
      );
    }
  }
  if (roles.has('complete')) {
    worker<CompleteJob>(COMPLETE_QUEUE, (job) => processCompleteJob(completeDeps, job.data), CONCURRENCY.complete);
  }
  if (roles.has('outbox')) {
    worker<OutboxJob>(OUTBOX_QUEUE, (job) => deliveryPass(job.data.workspaceId), CONCURRENCY.outbox);
  }
  if (roles.has('launch')) {
    worker<LaunchJob>(LAUNCH_QUEUE, (job) => processLaunchJob(launchDeps, job.data), CONCURRENCY.launch);
  }
  if (roles.has('admission')) {
    // Loaded only here, like the API: a worker-only process without this role does not load the REST commands.
    const { processAdmissionJob } = await import('../api/admission');
    const admissionDeps = { db, createTask, metrics, log: log.child({ role: 'admission' }) };
    worker<AdmissionJob>(ADMISSION_QUEUE, (job) => processAdmissionJob(admissionDeps, job), CONCURRENCY.admission);
  }
  if (roles.has('reaper')) {
    const rlog = log.child({ role: 'reaper' });
    await queues.get(REAPER_QUEUE).upsertJobScheduler('sweep', { every: config.sweepMs }, { name: 'sweep' });
    const reaperDeps = {
      effects,
      handlers,
      queues,
      log: rlog,
      actor: `reaper:${workerId}`,
      get workspaceId() {
        return sweepScope();
      },
      // The recovery lease and the quiet period before a resume follow the configured step lease.
      leaseMs: config.leaseMs,
      // Launch dispatch recovery observes the launch workers' runtime directory on this host.
      executor,
      metrics,
      stuckAfterMs: config.stuckAfterMs,
      stagedTtlMs: config.stagedTtlMs,
    };
    const deletionDeps = {
      db,
      dataDir: config.dataDir,
      log: rlog,
      wakeOutbox: roles.has('outbox') ? async (ws: string) => void (await deliveryPass(ws)) : undefined,
      wakeCleanup: async () => {
        await queues.get(CLEANUP_QUEUE).add('sweep', {}, { jobId: `cleanup-wake-${Date.now()}` });
      },
      announceEnded: (operationId: string) => queues.creationEvents.announce(operationId),
    };
    worker(
      REAPER_QUEUE,
      async (job) => {
        if (job.name === WORKSPACE_DELETION_JOB) {
          const { deletionId, workspaceId } = job.data as WorkspaceDeletionJob;
          return runWorkspaceDeletion(deletionDeps, deletionId, workspaceId);
        }
        const r = await sweepOnce(reaperDeps);
        const dispatch = r.dispatch ? r.dispatch.expired + r.dispatch.reconciled + r.dispatch.retried : 0;
        if (r.expiredSteps + r.expiredCompensations + r.wakeups + dispatch > 0) rlog.debug(r, 'sweep');
        return r;
      },
      CONCURRENCY.reaper,
    );
  }
  if (roles.has('cleanup')) {
    // Transferred effects (task_resource_cleanup_jobs), one pass per sweep period, like the reaper.
    const clog = log.child({ role: 'cleanup' });
    await queues.get(CLEANUP_QUEUE).upsertJobScheduler('cleanup-sweep', { every: config.sweepMs }, { name: 'sweep' });
    // The launch workers' executor on this host: a deleted task's agent is stopped from here (cleanup/deleted-task.ts).
    const cleanupDeps = { ...effects, log: clog, executor };
    worker(
      CLEANUP_QUEUE,
      async () => {
        const r = await runDueCleanupJobs(cleanupDeps, `cleanup:${workerId}`, { workspaceId: sweepScope() });
        if (r.done + r.retry + r.unknown > 0) clog.info(r, 'cleanup jobs');
        return r;
      },
      CONCURRENCY.cleanup,
    );
  }
  // What the API commands need (REST routes and MCP tools alike); `taskledger mcp` serves stdio from it too.
  const alog = log.child({ role: 'api' });
  const waker = { queues, log: alog, dispatchInPlace: roles.has('outbox') ? deliveryPass : undefined };
  const launchWaker = { db, queues, log: alog, launchInPlace };
  const apiDeps: ApiDeps = {
    db,
    config,
    log: alog,
    createTask,
    queues: queues.all(),
    recoveryQueues: queues,
    metrics,
    stepObserver: { effects, handlers },
    wakeOutbox: (workspaceId) => wakeOutbox(waker, workspaceId),
    wakeLaunches: async (taskIds) => {
      await wakeLaunches(launchWaker, taskIds);
    },
    wakeCleanup: async () => {
      await queues.get(CLEANUP_QUEUE).add('sweep', {}, { jobId: `cleanup-wake-${Date.now()}` });
    },
    startWorkspaceDeletion: async (deletionId, workspaceId) => {
      await queues
        .get(REAPER_QUEUE)
        .add(WORKSPACE_DELETION_JOB, { deletionId, workspaceId } satisfies WorkspaceDeletionJob, {
          jobId: workspaceDeletionJobId(deletionId),
        });
    },
  };
  let api: FastifyInstance | null = null;
  if (roles.has('api')) {
    // Loaded only here: Fastify, Bull Board and the routes cost a worker-only process ~13 MB of resident memory for nothing.
    const { buildApi } = await import('../api/server');
    api = buildApi(apiDeps);
    await api.listen({ port: config.port, host: '127.0.0.1' });
  }
  // Without the API, this process's counters are served on their own port when one is configured.
  let metricsServer: Server | null = null;
  const stopRoles = async () => {
    // BullMQ starts each worker and queue with commands of its own on the connection it was given, and does not
    // wait for them when closed: a connection closed under one rejects it where no one listens (seen once, as a
    // test's fleet stopped while it started). Let them answer first; a Redis that does not answer within a second
    // is closed under them as before.
    await Promise.race([
      Promise.allSettled([...workers, ...queues.all()].map((q) => q.waitUntilReady())),
      sleep(1000, undefined, { ref: false }),
    ]);
    await Promise.all(workers.map((w) => w.close()));
    for (const c of workerConnections) c.disconnect();
    await queues.close();
    connection.disconnect();
    await ds.destroy();
  };
  if (!api && config.metricsPort !== undefined) {
    const { serveMetrics } = await import('./metrics-server');
    try {
      metricsServer = await serveMetrics(metrics, config.metricsPort);
    } catch (err) {
      // Nothing keeps running for a process that cannot serve what it was told to: its roles stop, then it fails.
      await stopRoles();
      if ((err as { code?: string }).code !== 'EADDRINUSE') throw err;
      throw new Error(`TASKLEDGER_METRICS_PORT ${config.metricsPort} on 127.0.0.1 is already in use`, { cause: err });
    }
  }
  log.info({ roles: [...roles], worker_id: workerId, dialect: config.db.dialect }, 'taskledger fleet started');

  return {
    db,
    queues,
    metrics,
    api,
    apiDeps,
    workerId,
    metricsServer,
    async stop() {
      if (api) await api.close();
      if (metricsServer) await new Promise((resolve) => metricsServer.close(resolve));
      await stopRoles();
    },
  };
}
