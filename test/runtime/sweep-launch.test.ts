/**
 * A delivered task.created whose armed launch has no dispatch claim (its
 * launch wake-up was lost with Redis) gets its launch wake-up again from the
 * sweep: from the whole ledger when asked (a reaper's first sweep), and only
 * within the recent window afterwards, so a long-running reaper's sweeps do
 * not grow with the ledger's history. A deferred start's launch is re-sent
 * from its delivered task.dependencies_resolved. And a wake-up whose job ID still
 * belongs to a failed job is re-sent, not swallowed. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Worker } from 'bullmq';
import { launchJobId, LAUNCH_QUEUE, stepJobId, stepQueueName } from '../../queues/names';
import { retryUnpromotedStarts } from '../../src/runtime/deferred-retry';
import { deadlockOn } from '../support/db-faults';
import { sweepWakeups } from '../../src/runtime/sweep';
import { silentLogger } from '../../src/log';
import { claimLaunchDispatch } from '../../src/store/launch-dispatch';
import { moveTask } from '../../src/store/task-move';
import { completeTaskCreation } from '../../src/store/complete';
import { promoteDeferredLaunch } from '../../src/store/deferred-launch';
import { markTaskDone } from '../../src/store/task-done';
import type { OperationAuthority } from '../../src/store/types';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';

const t = useTestDb();
const { redis, queues } = useTestQueues('sweep-launch');

describe('stranded launches', () => {
  it('are re-sent from a full scan, and from the window only while they are recent', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    // Delivered by the dispatcher, whose launch wake-up was then lost.
    await sql(t.db, 'UPDATE event_outbox SET delivered_at = created_at WHERE operation_id = ?', [res.operationId]);
    const sessionId = (await stepRows(t.db, res.operationId)).find((s) => s.kind === 'launch_intent')!.step_key;
    const jobId = launchJobId(res.operationId, sessionId);
    const launchJob = () => queues.get(LAUNCH_QUEUE).getJob(jobId);

    // Recent: the window finds it.
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: 60_000 })).launches).toBe(
      1,
    );
    expect((await launchJob())?.data).toEqual({ operationId: res.operationId, taskId: res.task.id, sessionId });
    await queues.get(LAUNCH_QUEUE).obliterate({ force: true });

    // Delivered two hours ago: outside the window, found only by the full scan.
    const old = t.db.dialect === 'postgres' ? "now() - interval '2 hours'" : 'NOW(3) - INTERVAL 2 HOUR';
    await sql(t.db, `UPDATE event_outbox SET delivered_at = ${old} WHERE operation_id = ?`, [res.operationId]);
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: 60_000 })).launches).toBe(
      0,
    );
    expect(await launchJob()).toBeUndefined();
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId })).launches).toBe(1);
    expect(await launchJob()).toBeDefined();

    // Once a launch worker holds a dispatch claim, nothing is re-sent.
    await sql(
      t.db,
      `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, idempotency_key, request_sha256, lifecycle_generation, state, generation, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1, 'succeeded', 1, ${old}, ${old})`,
      [
        randomUUID(),
        res.operationId,
        res.task.id,
        sessionId,
        ws.workspaceId,
        `task-launch/${res.operationId}/${sessionId}`,
        'a'.repeat(64),
      ],
    );
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId })).launches).toBe(0);
  });
});

describe('a stranded deferred launch', () => {
  it('is re-sent once its task.dependencies_resolved is delivered, never from task.created alone', async () => {
    const ws = await seedWorkspace(t.db);
    const blocker = await begin(t.db, ws, { title: 'blocker' });
    const blockerAuth: OperationAuthority = { kind: 'handle', handle: blocker.handle! };
    await driveAllSteps(t.db, blockerAuth, blocker.operationId, ws.dataDir);
    await completeTaskCreation(t.db, blockerAuth);
    const res = await begin(t.db, ws, {
      blocked_by: [blocker.task.id],
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    await markTaskDone(t.db, blocker.task.id);
    // Promoted by the dispatcher, whose launch wake-up was then lost; task.created was delivered long before.
    const promotion = await promoteDeferredLaunch(t.db, res.operationId, 'test');
    if (!('sessionId' in promotion)) throw new Error(promotion.refused);
    await sql(t.db, "UPDATE event_outbox SET delivered_at = created_at WHERE task_id = ? AND type = 'task.created'", [
      res.task.id,
    ]);
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId })).launches).toBe(0);
    await sql(t.db, 'UPDATE event_outbox SET delivered_at = created_at WHERE task_id = ?', [res.task.id]);
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId })).launches).toBe(1);
    const job = await queues.get(LAUNCH_QUEUE).getJob(launchJobId(res.operationId, promotion.sessionId));
    expect(job?.data).toEqual({ operationId: res.operationId, taskId: res.task.id, sessionId: promotion.sessionId });
  });
});

describe('a WIP admission whose launch wake-up was lost', () => {
  it('a queued task is never woken; once a freed slot admits it, the windowed sweep wakes it once', async () => {
    const ws = await seedWorkspace(t.db);
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 1 WHERE id = ?', [ws.stepIds[1]!]);
    const make = async (title: string) => {
      const r = await begin(t.db, ws, {
        title,
        start_agent: true,
        agent_profile_id: ws.agentProfileId,
        workflow_step_id: ws.stepIds[1],
      });
      const auth: OperationAuthority = { kind: 'handle', handle: r.handle! };
      await driveAllSteps(t.db, auth, r.operationId, ws.dataDir);
      await completeTaskCreation(t.db, auth);
      await sql(t.db, 'UPDATE event_outbox SET delivered_at = created_at WHERE operation_id = ?', [r.operationId]);
      const sessionId = (await stepRows(t.db, r.operationId)).find((x) => x.kind === 'launch_intent')!.step_key;
      return { r, sessionId, job: { operationId: r.operationId, taskId: r.task.id, sessionId } };
    };
    const a = await make('a');
    const b = await make('b');
    const claim = (x: typeof a) =>
      claimLaunchDispatch(t.db, { operationId: x.r.operationId, sessionId: x.sessionId }, 'w', 60_000);
    expect('dispatchId' in (await claim(a))).toBe(true);
    expect(await claim(b)).toEqual({ queued: ws.stepIds[1] });
    await queues.get(LAUNCH_QUEUE).obliterate({ force: true });
    // Queued: its event was delivered and it has no claim, yet nothing is woken for it.
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: 60_000 })).launches).toBe(
      0,
    );
    // a moves out; b is admitted in the same transaction; the process dies before waking b's launch.
    expect((await moveTask(t.db, a.r.task.id, ws.stepIds[0]!)).admitted).toEqual([b.r.task.id]);
    // b's task.created was delivered two hours ago: only its recent admission finds it.
    const old = t.db.dialect === 'postgres' ? "now() - interval '2 hours'" : 'NOW(3) - INTERVAL 2 HOUR';
    await sql(t.db, `UPDATE event_outbox SET delivered_at = ${old} WHERE operation_id = ?`, [b.r.operationId]);
    expect((await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: 60_000 })).launches).toBe(
      1,
    );
    const job = await queues.get(LAUNCH_QUEUE).getJob(launchJobId(b.r.operationId, b.sessionId));
    expect(job?.data).toEqual(b.job);
  });
});

/**
 * A blocked creation whose blocker was marked done: its task.dependencies_resolved is delivered and its promotion
 * never committed (as if the dispatcher died between them). Returns the blocked creation.
 */
async function deliveredUnpromoted(ws: SeededWorkspace, title: string) {
  const blocker = await begin(t.db, ws, { title });
  const blockerAuth: OperationAuthority = { kind: 'handle', handle: blocker.handle! };
  await driveAllSteps(t.db, blockerAuth, blocker.operationId, ws.dataDir);
  await completeTaskCreation(t.db, blockerAuth);
  const res = await begin(t.db, ws, {
    blocked_by: [blocker.task.id],
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  await completeTaskCreation(t.db, auth);
  await markTaskDone(t.db, blocker.task.id);
  await sql(t.db, 'UPDATE event_outbox SET delivered_at = created_at WHERE task_id = ?', [res.task.id]);
  return res;
}

describe('a delivered deferred start that was never promoted', () => {
  it('is promoted by the sweep and its launch woken; a start the ledger refuses waits, backed off', async () => {
    const ws = await seedWorkspace(t.db);
    // The dispatcher marked the resolution delivered, and its promotion never committed.
    const res = await deliveredUnpromoted(ws, 'blocker');
    const deps = {
      db: t.db,
      queues,
      log: silentLogger(),
      actor: 'reaper',
      workspaceId: ws.workspaceId,
      backoff: new Map(),
    };
    expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 1, refused: 0 });
    const sessionId = (await stepRows(t.db, res.operationId)).find((x) => x.kind === 'launch_intent')!.step_key;
    expect((await queues.get(LAUNCH_QUEUE).getJob(launchJobId(res.operationId, sessionId)))?.data).toMatchObject({
      operationId: res.operationId,
      sessionId,
    });
    expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 0, refused: 0 });

    // A second one whose operation row no longer proves its plan (a tampered manifest hash): refused, then left alone.
    const other = await deliveredUnpromoted(ws, 'blocker 2');
    await sql(t.db, 'UPDATE task_creation_operations SET manifest_hash = ? WHERE id = ?', [
      'f'.repeat(64),
      other.operationId,
    ]);
    expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 0, refused: 1 });
    expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 0, refused: 0 });
  });

  it('is promoted by the next sweep after a database fault, not backed off as a refusal', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await deliveredUnpromoted(ws, 'blocker');
    const deps = {
      db: t.db,
      queues,
      log: silentLogger(),
      actor: 'reaper',
      workspaceId: ws.workspaceId,
      backoff: new Map(),
    };
    // The promotion's insert of the launch intent keeps failing as a deadlock would (`retry_exhausted`).
    const fault = await deadlockOn(t.db, 'task_creation_steps', 'INSERT', `NEW.operation_id = '${res.operationId}'`);
    try {
      expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 0, refused: 0 });
      expect(deps.backoff.size).toBe(0);
      await fault.off();
      expect(await retryUnpromotedStarts(deps, 60_000)).toEqual({ promoted: 1, refused: 0 });
    } finally {
      await fault.drop();
    }
  });
});

describe('wake-ups behind a failed job', () => {
  it('the sweep removes a failed job holding the same ID and sends the wake-up again', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const step = (await stepRows(t.db, res.operationId)).find((s) => s.kind === 'session_prepare')!;
    const jobId = stepJobId(step.id, Number(step.generation));
    const queue = queues.step('session_prepare');
    // The first wake-up's job failed (say the database dropped the claim's connection) and kept its ID.
    await queue.add('session_prepare', { operationId: res.operationId }, { jobId });
    const connection = redis.duplicate();
    const failing = new Worker(stepQueueName('session_prepare'), () => Promise.reject(new Error('connection reset')), {
      connection: redis.duplicate(),
      prefix: queues.prefix,
    });
    await new Promise<void>((resolve) => failing.on('failed', () => resolve()));
    await failing.close();
    connection.disconnect();
    expect(await (await queue.getJob(jobId))!.getState()).toBe('failed');

    await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId });
    expect(await (await queue.getJob(jobId))!.getState()).toBe('waiting');
  });
});
