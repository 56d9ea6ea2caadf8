/**
 * The launch's dispatch claim taken by Complete's phase B (ADR 0019,
 * store/launch-claim-in-complete.ts), against the real database and real
 * agent processes: for a claimant, phase B commits the claim (`running`,
 * generation 1, the claimant's lease), the session `starting` and the task's
 * WIP slot with `task.created`; the launch then starts under that claim and
 * takes none of its own, and a wake-up from anywhere else is refused while it
 * holds. No claim is written without a claimant, in a step with a WIP limit,
 * or with nothing to launch. A claimant that dies after phase B leaves a claim
 * that dispatch recovery retries from no-dispatch proof (one start in the
 * end), and one whose claim was recovered meanwhile starts nothing. Both
 * dialects.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { LAUNCH_QUEUE } from '../../queues/names';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { QueueSet } from '../../src/coordinator/queues';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { processLaunchJob, type LaunchWakeup, type LaunchWorkerDeps } from '../../src/launch/launch-worker';
import { silentLogger } from '../../src/log';
import { recoverLaunchDispatches } from '../../src/runtime/dispatch-recovery';
import { completeTaskCreation } from '../../src/store/complete';
import { dispatchIdempotencyKey } from '../../src/store/launch-dispatch';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { backdateClaim, launchLeftovers } from '../support/launch';
import { sentStatements } from '../support/round-trips';

const t = useTestDb();
const redis = new Redis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
const left = launchLeftovers();

afterEach(async () => {
  await left.clear();
});
afterAll(async () => {
  await redis.quit();
});

/** Writes one line per start into the agent's working directory, then stays alive. */
const AGENT = ['sh', '-c', 'echo started >> starts.log; exec sleep 30'];
const OWNER = `${hostname()}:claimant`;
const LEASE_MS = 60_000;

/** A creation whose steps all succeeded, its launch intent armed; Complete is left to the test. */
async function readyToComplete(body: Record<string, unknown> = {}, stepIndex = 0) {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: AGENT }),
    ws.agentProfileId,
  ]);
  const res = await begin(t.db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workflow_step_id: ws.stepIds[stepIndex],
    ...body,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  const sessionId = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'launch_intent')?.step_key ?? '';
  const key = dispatchIdempotencyKey(res.operationId, sessionId);
  left.keys.push(key);
  const executor = new LocalProcessExecutor(join(ws.dataDir, 'runtime'));
  const worker = (workerId: string): LaunchWorkerDeps => ({
    db: t.db,
    executor,
    dataDir: ws.dataDir,
    log: silentLogger(),
    metrics: null,
    workerId,
    leaseMs: LEASE_MS,
  });
  const job: LaunchWakeup = { operationId: res.operationId, taskId: res.task.id, sessionId };
  const startsFile = join(ws.dataDir, 'tasks', res.task.id, 'starts.log');
  const starts = () =>
    (existsSync(startsFile) ? readFileSync(startsFile, 'utf8').split('\n').filter(Boolean) : []).length;
  const queues = new QueueSet(redis, `tl-claim-in-complete-${randomUUID()}`);
  left.queueSets.push(queues);
  const recover = () =>
    recoverLaunchDispatches({
      db: t.db,
      queues,
      log: silentLogger(),
      actor: 'reaper:test',
      executor,
      workspaceId: ws.workspaceId,
    });
  return { ws, res, auth, sessionId, key, worker, job, starts, queues, recover };
}

async function claimRows(operationId: string) {
  const rows = await sql<{ state: string; generation: number; attempt: number; lease_owner: string | null }>(
    t.db,
    'SELECT state, generation, attempt, lease_owner FROM task_launch_dispatch_claims WHERE creation_operation_id = ?',
    [operationId],
  );
  return rows.map((r) => ({ ...r, generation: Number(r.generation), attempt: Number(r.attempt) }));
}

async function sessionState(sessionId: string): Promise<string | undefined> {
  const [row] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_sessions WHERE id = ?', [sessionId]);
  return row?.state;
}

async function admitted(taskId: string): Promise<boolean> {
  const [row] = await sql<{ wip_admitted: unknown }>(t.db, 'SELECT wip_admitted FROM tasks WHERE id = ?', [taskId]);
  return Boolean(Number(row?.wip_admitted));
}

const backdate = (operationId: string) => backdateClaim(t.db, operationId);

async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 20));
}

describe('the launch claim taken by phase B', () => {
  it('commits the claim with task.created; the launch starts under it and takes none of its own', async () => {
    const s = await readyToComplete();
    const done = await completeTaskCreation(t.db, s.auth, { claimant: { owner: OWNER, leaseMs: LEASE_MS } });
    expect(done.outcome).toBe('Created');
    const claim = await done.launch!;
    expect(claim).toMatchObject({
      operationId: s.res.operationId,
      sessionId: s.sessionId,
      generation: 1,
      owner: OWNER,
    });
    expect(claim.spec.environment_id).not.toBeNull();
    expect(await claimRows(s.res.operationId)).toEqual([
      { state: 'running', generation: 1, attempt: 1, lease_owner: OWNER },
    ]);
    expect(await sessionState(s.sessionId)).toBe('starting');
    expect(await admitted(s.res.task.id)).toBe(true);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [s.res.task.id])).toBe(1);

    // Anyone else's wake-up (another process's pass, the first outbox wake-up) is refused while the claim holds.
    expect(await processLaunchJob(s.worker('other'), s.job)).toBe('skipped');
    expect(await processLaunchJob(s.worker(OWNER), s.job, undefined, claim)).toBe('launched');
    await until(() => s.starts() >= 1);
    expect(await claimRows(s.res.operationId)).toEqual([
      { state: 'succeeded', generation: 1, attempt: 1, lease_owner: null },
    ]);
    expect(await sessionState(s.sessionId)).toBe('running');
    expect(await count(t.db, 'executors_running', 'session_id = ?', [s.sessionId])).toBe(1);
    expect(s.starts()).toBe(1);
  });

  it('writes the task row once in phase B: the completion takes the WIP slot with the claim', async () => {
    const s = await readyToComplete();
    const sent = sentStatements(t.db);
    const done = await completeTaskCreation(t.db, s.auth, { claimant: { owner: OWNER, leaseMs: LEASE_MS } });
    const claim = await done.launch!;
    vi.restoreAllMocks();
    expect(claim.generation).toBe(1);
    expect(await admitted(s.res.task.id)).toBe(true);
    const taskWrites = sent.filter((text) => /\bUPDATE tasks SET\b/.test(text));
    // Phase A's `preparing -> completing`, then phase B's one write: completed, admitted.
    expect(taskWrites).toHaveLength(2);
    expect(taskWrites[1]).toMatch(/creation_state = 'completed'[\s\S]*wip_admitted = /);
  });

  it('writes no claim without a claimant, in a step with a WIP limit, or with nothing to launch', async () => {
    const plain = await readyToComplete();
    const done = await completeTaskCreation(t.db, plain.auth);
    expect(done.launch).toBeUndefined();
    expect(await claimRows(plain.res.operationId)).toEqual([]);
    expect(await sessionState(plain.sessionId)).toBe('prepared');

    // The seeded second step has a WIP limit (2): its launch takes the admission lock in a claim of its own.
    const claimant = { owner: OWNER, leaseMs: LEASE_MS };
    const verified = await readyToComplete({}, 1);
    const inLimited = await completeTaskCreation(t.db, verified.auth, { claimant });
    expect(inLimited.outcome).toBe('Created');
    expect(inLimited.launch).toBeUndefined();
    expect(await claimRows(verified.res.operationId)).toEqual([]);
    expect(await processLaunchJob(verified.worker(OWNER), verified.job)).toBe('launched');
    expect(await claimRows(verified.res.operationId)).toMatchObject([{ state: 'succeeded', generation: 1 }]);

    const noAgent = await readyToComplete({ start_agent: false, agent_profile_id: undefined });
    const created = await completeTaskCreation(t.db, noAgent.auth, { claimant });
    expect(created.outcome).toBe('Created');
    expect(created.launch).toBeUndefined();
    expect(await claimRows(noAgent.res.operationId)).toEqual([]);
  });

  it('a claimant that dies after phase B: its lease runs out, recovery proves no dispatch, one start in the end', async () => {
    const s = await readyToComplete();
    const done = await completeTaskCreation(t.db, s.auth, { claimant: { owner: OWNER, leaseMs: LEASE_MS } });
    expect((await done.launch)?.generation).toBe(1);
    // A live lease is never expired or observed.
    expect(await s.recover()).toMatchObject({ retried: 0, expired: 0 });
    await backdate(s.res.operationId);
    expect(await s.recover()).toMatchObject({ retried: 1, expired: 1, woken: 1 });
    expect(await claimRows(s.res.operationId)).toMatchObject([{ state: 'retry_wait', generation: 2 }]);
    expect(await sessionState(s.sessionId)).toBe('prepared');
    const jobs = await s.queues.get(LAUNCH_QUEUE).getJobs(['waiting', 'prioritized', 'delayed']);
    expect(jobs.map((j) => j.data as LaunchWakeup)).toEqual([{ ...s.job, generation: 2 }]);
    expect(await processLaunchJob(s.worker('w2'), jobs[0]!.data as LaunchWakeup)).toBe('launched');
    await until(() => s.starts() >= 1);
    expect(await claimRows(s.res.operationId)).toMatchObject([{ state: 'succeeded', generation: 3 }]);
    expect(s.starts()).toBe(1);
  });

  it('a claimant whose claim was recovered before its start starts nothing', async () => {
    const s = await readyToComplete();
    const done = await completeTaskCreation(t.db, s.auth, { claimant: { owner: OWNER, leaseMs: LEASE_MS } });
    const claim = await done.launch!;
    await backdate(s.res.operationId);
    expect(await s.recover()).toMatchObject({ retried: 1 });
    expect(await processLaunchJob(s.worker(OWNER), s.job, undefined, claim)).toBe('skipped');
    expect(await claimRows(s.res.operationId)).toMatchObject([{ state: 'retry_wait', generation: 2 }]);
    expect(s.starts()).toBe(0);
    expect(findDispatchProcesses(s.key)).toHaveLength(0);
  });
});
