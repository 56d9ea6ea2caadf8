/**
 * A worker that runs both the steps and the complete roles finishes an
 * operation's launch intent and Complete in place once they are its only work
 * left: no launch-intent job and no Complete job go through Redis, and the
 * ledger ends exactly as with queued jobs (armed intent, one task.created).
 * Without `inline`, the same step leaves both as queued wake-ups. A process
 * that also runs the outbox and launch roles then delivers `task.created` and
 * starts the agent in the same pass (no outbox or launch job) — wired as the
 * fleet wires it, under the dispatch claim phase B took (ADR 0019); when
 * either in-place pass throws, its wake-up is queued instead, so nothing is
 * lost. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { COMPLETE_QUEUE, LAUNCH_QUEUE, OUTBOX_QUEUE, stepQueueName, type LaunchJob } from '../../queues/names';
import type { CompleteWorkerDeps } from '../../src/coordinator/complete-worker';
import { processStepJob, type StepWorkerDeps } from '../../src/coordinator/step-worker';
import type { StepKind } from '../../src/domain/vocab';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { processLaunchJob } from '../../src/launch/launch-worker';
import { silentLogger } from '../../src/log';
import { createMetrics } from '../../src/metrics';
import { processOutboxJob } from '../../src/outbox/dispatcher';
import { createProviderRegistry } from '../../src/providers/registry';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandler } from '../../src/kinds/contract';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { deadlockOn } from '../support/db-faults';
import type { DispatchClaim } from '../../src/store/launch-dispatch';
import type { OutboxMark } from '../../src/store/outbox-mark';
import { begin, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';

const t = useTestDb();
const { queues } = useTestQueues('inline');

/** A creation whose every step but the session and the launch intent already succeeded. */
async function readyForSession() {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const effects = {
    db: t.db,
    dataDir: ws.dataDir,
    providers: createProviderRegistry({ timeoutMs: 5000 }),
    log: silentLogger(),
    timeoutMs: 5000,
  };
  const rows = await stepRows(t.db, res.operationId);
  for (const row of rows.filter((r) => r.kind !== 'session_prepare' && r.kind !== 'launch_intent')) {
    const kind = row.kind as StepKind;
    const claim = await claimTaskCreationStep(t.db, auth, { kind, stepKey: row.step_key }, 'worker-0');
    expect(await (defaultStepHandlers[kind] as StepHandler).perform(effects, claim, async () => {})).toBe('succeeded');
  }
  const session = rows.find((r) => r.kind === 'session_prepare')!;
  const job = {
    operationId: res.operationId,
    stepId: session.id,
    kind: 'session_prepare' as const,
    stepKey: session.step_key,
    generation: Number(session.generation),
  };
  return { ws, res, effects, job };
}

const waiting = async (name: string) => (await queues.get(name).getJobCounts('waiting')).waiting ?? 0;

/** A step worker's deps; `inline` set means the process also runs the complete role. */
function workerDeps(
  effects: StepWorkerDeps['effects'],
  workerId: string,
  inline?: StepWorkerDeps['inline'],
): StepWorkerDeps {
  return {
    effects,
    handlers: defaultStepHandlers,
    queues,
    log: silentLogger(),
    metrics: null,
    workerId,
    leaseMs: 30_000,
    inline,
  };
}

describe('inline launch intent and Complete', () => {
  it('runs them in place: no launch or Complete job, one task.created', async () => {
    const { res, effects, job } = await readyForSession();
    const log = silentLogger();
    const metrics = createMetrics();
    const deps = {
      ...workerDeps(effects, 'inline-worker', {
        complete: { db: t.db, queues, log, metrics: null, workerId: 'inline-worker' },
      }),
      metrics,
    };
    const launchBefore = await waiting(stepQueueName('launch_intent'));
    const completeBefore = await waiting(COMPLETE_QUEUE);
    expect(await processStepJob(deps, job, 'test-job')).toBe('succeeded');
    const steps = await stepRows(t.db, res.operationId);
    expect(steps.find((s) => s.kind === 'launch_intent')!.state).toBe('armed');
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'completed'", [res.operationId])).toBe(1);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
    expect(await waiting(stepQueueName('launch_intent'))).toBe(launchBefore);
    expect(await waiting(COMPLETE_QUEUE)).toBe(completeBefore);
    // Complete's phase A went with the batch that armed the launch intent (ADR 0016); phase B ran on its own.
    const phaseA = await metrics.phaseAInBatch.get();
    expect(phaseA.values.map((v) => [v.labels.result, v.value])).toEqual([['completing', 1]]);
  });

  it('without inline, the same step arms the launch intent in its batch and leaves Complete as a queued wake-up', async () => {
    const { res, effects, job } = await readyForSession();
    const deps = workerDeps(effects, 'queued-worker');
    const launchBefore = await waiting(stepQueueName('launch_intent'));
    const completeBefore = await waiting(COMPLETE_QUEUE);
    expect(await processStepJob(deps, job, 'test-job')).toBe('succeeded');
    const steps = await stepRows(t.db, res.operationId);
    expect(steps.find((s) => s.kind === 'launch_intent')!.state).toBe('armed');
    expect(await waiting(stepQueueName('launch_intent'))).toBe(launchBefore);
    expect(await waiting(COMPLETE_QUEUE)).toBe(completeBefore + 1);
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'preparing'", [res.operationId])).toBe(1);
  });

  it('a launch intent whose handler cannot join a batch is left as a queued wake-up', async () => {
    const { res, effects, job } = await readyForSession();
    const { applyLocks: _unused, ...alone } = defaultStepHandlers.launch_intent;
    const deps = {
      ...workerDeps(effects, 'queued-worker'),
      handlers: { ...defaultStepHandlers, launch_intent: alone },
    };
    const launchBefore = await waiting(stepQueueName('launch_intent'));
    expect(await processStepJob(deps, job, 'test-job')).toBe('succeeded');
    expect(await waiting(stepQueueName('launch_intent'))).toBe(launchBefore + 1);
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'preparing'", [res.operationId])).toBe(1);
  });
});

describe('in-place outbox delivery and launch after Complete', () => {
  /** `claimant`: wired as the fleet wires a process that runs the outbox and launch roles too (ADR 0019). */
  async function run(options: {
    failDispatch?: boolean;
    failLaunch?: boolean;
    claimant?: boolean;
    /** A launch claim of its own (inserted `planned`) for this creation fails, as a deadlock would. */
    noOwnClaim?: boolean;
  }) {
    const { ws, res, effects, job } = await readyForSession();
    // Scoped to this creation: the database is shared with the other test files running meanwhile.
    const ownClaim = options.noOwnClaim
      ? await deadlockOn(
          t.db,
          'task_launch_dispatch_claims',
          'INSERT',
          `NEW.state = 'planned' AND NEW.creation_operation_id = '${res.operationId}'`,
        )
      : undefined;
    const log = silentLogger();
    const launchDeps = {
      db: t.db,
      executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')),
      dataDir: ws.dataDir,
      log,
      metrics: null,
      workerId: 'inline-worker',
      leaseMs: 30_000,
    };
    const launchInPlace = async (launch: LaunchJob, mark?: OutboxMark, taken?: DispatchClaim) => {
      if (options.failLaunch) throw new Error('in-place launch broke');
      return processLaunchJob(launchDeps, launch, mark, taken);
    };
    const outboxDeps = { db: t.db, queues, log, metrics: null };
    const complete: CompleteWorkerDeps = {
      db: t.db,
      queues,
      log,
      metrics: null,
      workerId: 'inline-worker',
      dispatchInPlace: async (workspaceId, operationId, prefetched, taken) => {
        if (options.failDispatch) throw new Error('in-place dispatch broke');
        return processOutboxJob(outboxDeps, { workspaceId, operationId }, { launchInPlace, taken }, prefetched);
      },
      claimant: options.claimant ? { owner: 'inline-worker', leaseMs: 30_000 } : undefined,
    };
    const deps = workerDeps(effects, 'inline-worker', { complete });
    const outboxBefore = await waiting(OUTBOX_QUEUE);
    const launchBefore = await waiting(LAUNCH_QUEUE);
    try {
      expect(await processStepJob(deps, job, 'test-job')).toBe('succeeded');
    } finally {
      await ownClaim?.drop();
    }
    const delivered = await count(
      t.db,
      'event_outbox',
      "task_id = ? AND type = 'task.created' AND delivered_at IS NOT NULL",
      [res.task.id],
    );
    const launched = await count(
      t.db,
      'task_launch_dispatch_claims',
      "creation_operation_id = ? AND state = 'succeeded'",
      [res.operationId],
    );
    const [claim] = await sql<{ generation: number }>(
      t.db,
      'SELECT generation FROM task_launch_dispatch_claims WHERE creation_operation_id = ?',
      [res.operationId],
    );
    return {
      delivered,
      launched,
      generation: claim === undefined ? null : Number(claim.generation),
      outboxJobs: (await waiting(OUTBOX_QUEUE)) - outboxBefore,
      launchJobs: (await waiting(LAUNCH_QUEUE)) - launchBefore,
      completed: await count(t.db, 'task_creation_operations', "id = ? AND state = 'completed'", [res.operationId]),
    };
  }

  /** Delivered and launched in the same pass, under the first claim: no outbox or launch job. */
  const LAUNCHED_IN_PLACE = { delivered: 1, launched: 1, generation: 1, outboxJobs: 0, launchJobs: 0, completed: 1 };

  it('delivers task.created and launches the agent in the same pass: no outbox or launch job', async () => {
    expect(await run({})).toEqual(LAUNCHED_IN_PLACE);
  });

  // The launch in place runs under the claim phase B took: a claim of its own (inserted `planned`) fails here.
  it('with the launch role, phase B takes the claim and the launch in place starts under it', async () => {
    expect(await run({ claimant: true, noOwnClaim: true })).toEqual(LAUNCHED_IN_PLACE);
  });

  it('a failing in-place delivery queues the dispatcher wake-up; the event stays undelivered for it', async () => {
    expect(await run({ failDispatch: true })).toEqual({
      delivered: 0,
      launched: 0,
      generation: null,
      outboxJobs: 1,
      launchJobs: 0,
      completed: 1,
    });
  });

  it('a failing in-place launch queues the launch wake-up before the event is marked delivered', async () => {
    expect(await run({ failLaunch: true })).toEqual({
      delivered: 1,
      launched: 0,
      generation: null,
      outboxJobs: 0,
      launchJobs: 1,
      completed: 1,
    });
  });
});
