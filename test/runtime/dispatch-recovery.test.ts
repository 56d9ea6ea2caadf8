/**
 * Launch-dispatch recovery against the real database, Redis and real agent
 * processes: a launch worker that died holding a dispatch claim is recovered
 * by proof only — no-dispatch proof retries it (one start in the end),
 * runtime proof reconciles it (never a second start), stale wake-ups and
 * stale claims start nothing, and no proof either way leaves it `unknown`
 * with a log line. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { LAUNCH_QUEUE } from '../../queues/names';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { QueueSet } from '../../src/coordinator/queues';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { ExecutorError, LocalProcessExecutor, type Executor } from '../../src/launch/executor';
import { processLaunchJob, type LaunchWakeup, type LaunchWorkerDeps } from '../../src/launch/launch-worker';
import { silentLogger } from '../../src/log';
import { recoverLaunchDispatches } from '../../src/runtime/dispatch-recovery';
import { completeTaskCreation } from '../../src/store/complete';
import { dispatchIdempotencyKey } from '../../src/store/launch-dispatch';
import { findUnknownDispatches, retryLaunchDispatch } from '../../src/store/launch-dispatch-recovery';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { backdateClaim, launchLeftovers } from '../support/launch';

const t = useTestDb();
const redis = new Redis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
const left = launchLeftovers();

afterEach(async () => {
  disarmAll();
  await left.clear();
});
afterAll(async () => {
  await redis.quit();
});

/** Writes one line per start into the agent's working directory, then stays alive. */
const LONG_AGENT = ['sh', '-c', 'echo started >> starts.log; exec sleep 30'];
/** Writes one line per start and exits at once. */
const SHORT_AGENT = ['sh', '-c', 'echo started >> starts.log'];

async function completedLaunch(command: string[]) {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command }),
    ws.agentProfileId,
  ]);
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  const sessionId = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'launch_intent')!.step_key;
  const key = dispatchIdempotencyKey(res.operationId, sessionId);
  left.keys.push(key);
  const executor = new LocalProcessExecutor(join(ws.dataDir, 'runtime'));
  const worker = (workerId: string, exec: Executor = executor): LaunchWorkerDeps => ({
    db: t.db,
    executor: exec,
    dataDir: ws.dataDir,
    log: silentLogger(),
    metrics: null,
    workerId: `${hostname()}:${workerId}`,
    leaseMs: 60_000,
  });
  const job: LaunchWakeup = { operationId: res.operationId, taskId: res.task.id, sessionId };
  const startsFile = join(ws.dataDir, 'tasks', res.task.id, 'starts.log');
  const starts = () =>
    (existsSync(startsFile) ? readFileSync(startsFile, 'utf8').split('\n').filter(Boolean) : []).length;
  const queues = new QueueSet(redis, `tl-dispatch-${randomUUID()}`);
  left.queueSets.push(queues);
  const recover = (log = silentLogger()) =>
    recoverLaunchDispatches({ db: t.db, queues, log, actor: 'reaper:test', executor, workspaceId: ws.workspaceId });
  return { ws, res, sessionId, key, executor, worker, job, starts, queues, recover };
}

async function claimRow(operationId: string) {
  const [row] = await sql<{ id: string; state: string; generation: number; error_code: string | null }>(
    t.db,
    'SELECT id, state, generation, error_code FROM task_launch_dispatch_claims WHERE creation_operation_id = ?',
    [operationId],
  );
  return { ...row!, generation: Number(row!.generation) };
}

async function sessionState(sessionId: string): Promise<string> {
  const [row] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_sessions WHERE id = ?', [sessionId]);
  return row!.state;
}

const backdate = (operationId: string) => backdateClaim(t.db, operationId);

/** Polls a condition with no deadline of its own (the test timeout bounds it). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 20));
}

const crashAtClaim = () => armFailpoint('after_dispatch_claim_before_runtime_start', { kind: 'throw' }, { times: 1 });

/** An executor whose worker dies right after the agent started, before the runtime is recorded. */
const dyingAfterStart = (executor: LocalProcessExecutor): Executor => ({
  kind: executor.kind,
  host: executor.host,
  stop: (ref) => executor.stop(ref),
  start: async (req) => {
    await executor.start(req);
    throw new Error('worker died before recording the runtime');
  },
  observe: (ref) => executor.observe(ref),
});

describe('launch-dispatch recovery', () => {
  it('a crash right after the dispatch claim is retried from no-dispatch proof and starts exactly one runtime', async () => {
    const s = await completedLaunch(LONG_AGENT);
    crashAtClaim();
    await expect(processLaunchJob(s.worker('doomed'), s.job)).rejects.toBeInstanceOf(FailpointError);
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'running', generation: 1 });
    expect(await sessionState(s.sessionId)).toBe('starting');

    // A live lease is never expired or observed.
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 0, left: 0, expired: 0, woken: 0, exhausted: 0 });

    await backdate(s.res.operationId);
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 1, left: 0, expired: 1, woken: 1, exhausted: 0 });
    expect(await claimRow(s.res.operationId)).toMatchObject({
      state: 'retry_wait',
      generation: 2,
      error_code: 'no_dispatch_proven',
    });
    expect(await sessionState(s.sessionId)).toBe('prepared');
    expect(s.starts()).toBe(0);

    // The launch wake-up for generation 2 is in the queue; a worker processes it.
    const jobs = await s.queues.get(LAUNCH_QUEUE).getJobs(['waiting', 'prioritized', 'delayed']);
    expect(jobs.map((j) => j.data as LaunchWakeup)).toEqual([{ ...s.job, generation: 2 }]);
    expect(await processLaunchJob(s.worker('w2'), jobs[0]!.data as LaunchWakeup)).toBe('launched');
    await until(() => s.starts() >= 1);

    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 3 });
    expect(await sessionState(s.sessionId)).toBe('running');
    expect(await count(t.db, 'executors_running', 'session_id = ?', [s.sessionId])).toBe(1);
    // The outbox's first wake-up redelivered, and another pass: nothing more starts.
    expect(await processLaunchJob(s.worker('w3'), s.job)).toBe('skipped');
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 0, left: 0, expired: 0, woken: 0, exhausted: 0 });
    expect(findDispatchProcesses(s.key)).toHaveLength(1);
    expect(s.starts()).toBe(1);
  });

  it('a worker that started the runtime but died before recording it is reconciled from runtime proof, never started twice', async () => {
    const s = await completedLaunch(LONG_AGENT);
    await expect(processLaunchJob(s.worker('doomed', dyingAfterStart(s.executor)), s.job)).rejects.toThrow(
      'worker died',
    );
    await until(() => s.starts() >= 1);
    // The agent writes its line, then execs `sleep`: while the kernel swaps its image, /proc/<pid>/environ can
    // read empty, so wait until the key is seen (recovery never treats an unseen process as no dispatch while a
    // start marker exists: it leaves the claim for a later pass).
    await until(() => (findDispatchProcesses(s.key)?.length ?? 0) >= 1);
    const [pid] = findDispatchProcesses(s.key)!;
    expect(pid).toBeDefined();
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'running', generation: 1 });

    await backdate(s.res.operationId);
    expect(await s.recover()).toEqual({ reconciled: 1, retried: 0, left: 0, expired: 1, woken: 0, exhausted: 0 });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 1, error_code: null });
    expect(await sessionState(s.sessionId)).toBe('running');
    const runtimes = await sql<{ pid: number; state: string; dispatch_claim_id: string }>(
      t.db,
      'SELECT pid, state, dispatch_claim_id FROM executors_running WHERE session_id = ?',
      [s.sessionId],
    );
    expect(runtimes).toHaveLength(1);
    expect(Number(runtimes[0]!.pid)).toBe(pid);
    expect(runtimes[0]!.state).toBe('running');
    const [claim] = await sql<{ runtime_handle: string; evidence_sha256: string | null }>(
      t.db,
      'SELECT runtime_handle, evidence_sha256 FROM task_launch_dispatch_claims WHERE session_id = ?',
      [s.sessionId],
    );
    expect(JSON.parse(claim!.runtime_handle)).toMatchObject({ kind: 'local', pid });
    expect(claim!.evidence_sha256).toMatch(/^[0-9a-f]{64}$/);

    // Redelivered wake-ups and later passes start nothing.
    expect(await processLaunchJob(s.worker('w2'), s.job)).toBe('skipped');
    expect(await processLaunchJob(s.worker('w3'), { ...s.job, generation: 1 })).toBe('skipped');
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 0, left: 0, expired: 0, woken: 0, exhausted: 0 });
    expect(findDispatchProcesses(s.key)).toEqual([pid]);
    expect(s.starts()).toBe(1);
  });

  it('an agent that already exited (exit recorded) is reconciled as exited, not started again', async () => {
    const s = await completedLaunch(SHORT_AGENT);
    await expect(processLaunchJob(s.worker('doomed', dyingAfterStart(s.executor)), s.job)).rejects.toThrow(
      'worker died',
    );
    await until(() => existsSync(s.executor.exitPath(s.sessionId)));
    await backdate(s.res.operationId);
    expect(await s.recover()).toMatchObject({ reconciled: 1, retried: 0, left: 0, expired: 1 });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 1 });
    expect(await sessionState(s.sessionId)).toBe('stopped');
    const runtimes = await sql<{ state: string }>(t.db, 'SELECT state FROM executors_running WHERE session_id = ?', [
      s.sessionId,
    ]);
    expect(runtimes.map((r) => r.state)).toEqual(['exited']);
    expect(await processLaunchJob(s.worker('w2'), s.job)).toBe('skipped');
    expect(s.starts()).toBe(1);
  });

  it('an agent that exited while no worker watched (no exit record) is reconciled as exited, not started again', async () => {
    const s = await completedLaunch(SHORT_AGENT);
    await expect(processLaunchJob(s.worker('doomed', dyingAfterStart(s.executor)), s.job)).rejects.toThrow(
      'worker died',
    );
    await until(() => existsSync(s.executor.exitPath(s.sessionId)));
    // The exit watcher died with its worker before writing the exit record.
    rmSync(s.executor.exitPath(s.sessionId));
    await until(() => (findDispatchProcesses(s.key) ?? []).length === 0);
    await backdate(s.res.operationId);
    expect(await s.recover()).toMatchObject({ reconciled: 1, retried: 0, left: 0, expired: 1 });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 1 });
    expect(await sessionState(s.sessionId)).toBe('stopped');
    expect(await processLaunchJob(s.worker('w2'), s.job)).toBe('skipped');
    expect(s.starts()).toBe(1);
  });

  it('a stale launch job (old generation) does nothing', async () => {
    const s = await completedLaunch(LONG_AGENT);
    crashAtClaim();
    await expect(processLaunchJob(s.worker('doomed'), s.job)).rejects.toBeInstanceOf(FailpointError);
    await backdate(s.res.operationId);
    expect(await s.recover()).toMatchObject({ retried: 1 });
    const before = await claimRow(s.res.operationId);
    expect(before).toMatchObject({ state: 'retry_wait', generation: 2 });

    for (const generation of [0, 1, 3]) {
      expect(await processLaunchJob(s.worker(`stale-${generation}`), { ...s.job, generation })).toBe('skipped');
    }
    expect(await claimRow(s.res.operationId)).toEqual(before);
    expect(await sessionState(s.sessionId)).toBe('prepared');
    expect(existsSync(s.executor.markerPath(s.sessionId))).toBe(false);
    expect(findDispatchProcesses(s.key)).toEqual([]);
    expect(s.starts()).toBe(0);
  });

  it('a worker paused past its lease while recovery retried and another worker launched starts nothing', async () => {
    const s = await completedLaunch(LONG_AGENT);
    let second: string | null = null;
    armFailpoint(
      'after_dispatch_claim_before_runtime_start',
      {
        kind: 'call',
        fn: async () => {
          // While the first worker is paused: its lease expires, recovery retries, a second worker launches.
          await backdate(s.res.operationId);
          expect(await s.recover()).toMatchObject({ expired: 1, retried: 1 });
          second = await processLaunchJob(s.worker('second'), { ...s.job, generation: 2 });
        },
      },
      { times: 1 },
    );
    // The paused worker re-checks its claim before any I/O: its executor is never asked to start.
    let pausedStarts = 0;
    const counting: Executor = {
      kind: s.executor.kind,
      host: s.executor.host,
      stop: (ref) => s.executor.stop(ref),
      start: (req) => {
        pausedStarts++;
        return s.executor.start(req);
      },
      observe: (ref) => s.executor.observe(ref),
    };
    expect(await processLaunchJob(s.worker('paused', counting), s.job)).toBe('skipped');
    expect(pausedStarts).toBe(0);
    expect(second).toBe('launched');
    await until(() => s.starts() >= 1);
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 3 });
    expect(await count(t.db, 'executors_running', 'session_id = ?', [s.sessionId])).toBe(1);
    expect(findDispatchProcesses(s.key)).toHaveLength(1);
    expect(s.starts()).toBe(1);
  });

  it('the executor refuses a start from a generation older than the marker', async () => {
    const s = await completedLaunch(LONG_AGENT);
    expect(await processLaunchJob(s.worker('w1'), s.job)).toBe('launched');
    const req = {
      idempotencyKey: s.key,
      generation: 0,
      sessionId: s.sessionId,
      taskId: s.res.task.id,
      operationId: s.res.operationId,
      command: LONG_AGENT,
      cwd: join(s.ws.dataDir, 'tasks', s.res.task.id),
      env: {},
    };
    const err = await s.executor.start(req).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExecutorError);
    expect((err as ExecutorError).failureClass).toBe('stale');
    // The same generation replays the recorded start instead of spawning.
    expect((await s.executor.start({ ...req, generation: 1 })).started).toBe(false);
    await until(() => s.starts() >= 1);
    expect(findDispatchProcesses(s.key)).toHaveLength(1);
    expect(s.starts()).toBe(1);
  });

  it('an unknown dispatch with no proof either way stays unknown, with a log line', async () => {
    const s = await completedLaunch(LONG_AGENT);
    crashAtClaim();
    await expect(processLaunchJob(s.worker('doomed'), s.job)).rejects.toBeInstanceOf(FailpointError);
    // The worker died after writing `starting` and before the spawn was known: no process, no start record.
    mkdirSync(join(s.ws.dataDir, 'runtime'), { recursive: true });
    writeFileSync(
      s.executor.markerPath(s.sessionId),
      canonicalJson({ idempotency_key: s.key, session_id: s.sessionId, generation: 1, state: 'starting', pid: null }),
    );
    await backdate(s.res.operationId);
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    expect(await s.recover(log)).toEqual({ reconciled: 0, retried: 0, left: 1, expired: 1, woken: 0, exhausted: 0 });
    expect(await s.recover(log)).toEqual({ reconciled: 0, retried: 0, left: 1, expired: 0, woken: 0, exhausted: 0 });
    expect(await claimRow(s.res.operationId)).toMatchObject({
      state: 'unknown',
      generation: 1,
      error_code: 'lease_expired',
    });
    expect(await sessionState(s.sessionId)).toBe('starting');
    const stays = lines
      .map((l) => JSON.parse(l) as { msg: string; dispatch_id?: string; reason?: string })
      .filter((l) => l.msg.includes('stays unknown'));
    expect(stays).toHaveLength(2);
    expect(stays[0]).toMatchObject({ reason: 'the start marker says starting and no process carries the key' });
    expect(stays[0]!.dispatch_id).toBe((await claimRow(s.res.operationId)).id);
    // Nothing was started, and a wake-up cannot start it either.
    expect(await processLaunchJob(s.worker('w2'), s.job)).toBe('skipped');
    expect(findDispatchProcesses(s.key)).toEqual([]);
    expect(s.starts()).toBe(0);
  });

  it('a claim another reaper settles while this one observes it is reported as settled, not as unknown', async () => {
    const s = await completedLaunch(LONG_AGENT);
    await expect(processLaunchJob(s.worker('doomed', dyingAfterStart(s.executor)), s.job)).rejects.toThrow(
      'worker died',
    );
    await until(() => s.starts() >= 1);
    await backdate(s.res.operationId);
    // This reaper observes the runtime; meanwhile the other process's reaper reconciles the same claim.
    let other: Awaited<ReturnType<typeof s.recover>> | undefined;
    const racing: Executor = {
      ...dyingAfterStart(s.executor),
      observe: async (ref) => {
        const seen = await s.executor.observe(ref);
        other = await s.recover();
        return seen;
      },
    };
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const report = await recoverLaunchDispatches({
      db: t.db,
      queues: s.queues,
      log,
      actor: 'reaper:test',
      executor: racing,
      workspaceId: s.ws.workspaceId,
    });
    expect(other).toMatchObject({ reconciled: 1 });
    expect(report).toMatchObject({ reconciled: 0, retried: 0, left: 1, expired: 1 });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'succeeded', generation: 1 });
    const msgs = lines.map((l) => JSON.parse(l) as { msg: string; state?: string });
    expect(msgs.filter((l) => l.msg.includes('stays unknown'))).toEqual([]);
    expect(msgs.filter((l) => l.msg.includes('already settled'))).toEqual([
      expect.objectContaining({ state: 'succeeded' }),
    ]);
    expect(s.starts()).toBe(1);
  });

  it('a claim last held on another host is not retried from absence observed here', async () => {
    const s = await completedLaunch(LONG_AGENT);
    crashAtClaim();
    const elsewhere = { ...s.worker('unused'), workerId: 'another-host:4242:abcd' };
    await expect(processLaunchJob(elsewhere, s.job)).rejects.toBeInstanceOf(FailpointError);
    await backdate(s.res.operationId);
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 0, left: 1, expired: 1, woken: 0, exhausted: 0 });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'unknown', generation: 1 });
    // The Store refuses a forged proof from this host too, with zero writes.
    const [target] = await findUnknownDispatches(t.db, 10, s.ws.workspaceId);
    expect(target!.lastOwner).toBe('another-host:4242:abcd');
    const proof = {
      idempotency_key: s.key,
      generation: 1,
      executor: 'local',
      host: s.executor.host,
      marker: 'absent' as const,
      processes: 0 as const,
    };
    await expect(retryLaunchDispatch(t.db, target!, proof, 'reaper:test')).rejects.toMatchObject({
      code: 'evidence_mismatch',
    });
    expect(await claimRow(s.res.operationId)).toMatchObject({ state: 'unknown', generation: 1 });
  });

  it('an unknown dispatch owned by workspace deletion is not reconciled or retried here', async () => {
    const s = await completedLaunch(LONG_AGENT);
    crashAtClaim();
    await expect(processLaunchJob(s.worker('doomed'), s.job)).rejects.toBeInstanceOf(FailpointError);
    await backdate(s.res.operationId);
    expect(await s.recover(silentLogger())).toMatchObject({ expired: 1, retried: 1 });
    // Back to unknown, now fenced by a deletion operation: only transfer may touch it.
    await sql(
      t.db,
      "UPDATE task_launch_dispatch_claims SET state = 'unknown', deletion_operation_id = ? WHERE creation_operation_id = ?",
      [randomUUID(), s.res.operationId],
    );
    const before = await claimRow(s.res.operationId);
    expect(await s.recover()).toEqual({ reconciled: 0, retried: 0, left: 0, expired: 0, woken: 0, exhausted: 0 });
    expect(await claimRow(s.res.operationId)).toEqual(before);
  });
});
