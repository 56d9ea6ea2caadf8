/**
 * A launch that will not happen ends visibly and gives its WIP slot back
 * (issue 13, gap 5; store/launch-dispatch-end.ts, store/task-done.ts):
 * - the agent profile changed after Begin: the claim is cancelled
 *   (`launch_config_changed`), nothing starts, the session is stopped, the
 *   slot admits the next queued task;
 * - the OS refused every start: after MAX_LAUNCH_ATTEMPTS the dispatch pass
 *   cancels the claim (`retries_exhausted`) and the slot admits the next task;
 * - a task marked done leaves its slot (the next queued task is admitted) and
 *   its never-started launch is cancelled (`task_done`); a done task is never
 *   launched;
 * - an agent runtime found before Complete is handed to a cleanup job that
 *   stops it, after which the step is decided and the creation ends.
 * Both dialects, real agent processes.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { processStepJob } from '../../src/coordinator/step-worker';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { MAX_LAUNCH_ATTEMPTS, recoverLaunchDispatches } from '../../src/runtime/dispatch-recovery';
import { sweepOnce } from '../../src/runtime/reaper';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { dispatchIdempotencyKey } from '../../src/store/launch-dispatch';
import { markTaskDone } from '../../src/store/task-done';
import type { BeginResult, OperationAuthority } from '../../src/store/types';
import { readTaskDetail } from '../../src/api/task-detail';
import { count, sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb(12);

async function world(command: string[], limit: number): Promise<SeededWorkspace> {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command }),
    ws.agentProfileId,
  ]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = ? WHERE id = ?', [limit, ws.stepIds[1]!]);
  return ws;
}

interface Created extends BeginResult {
  sessionId: string;
}

async function created(ws: SeededWorkspace, title: string): Promise<Created> {
  const res = await begin(t.db, ws, {
    title,
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workflow_step_id: ws.stepIds[1]!,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  const [intent] = await sql<{ step_key: string }>(
    t.db,
    "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
    [res.operationId],
  );
  return { ...res, sessionId: intent!.step_key };
}

const launch = (ws: SeededWorkspace, c: Created) =>
  launchNow(t.db, ws.dataDir, { operationId: c.operationId, taskId: c.task.id, sessionId: c.sessionId });

async function claimOf(taskId: string) {
  const [row] = await sql<{ state: string; error_code: string | null; attempt: number | string }>(
    t.db,
    'SELECT state, error_code, attempt FROM task_launch_dispatch_claims WHERE task_id = ?',
    [taskId],
  );
  return row && { state: row.state, error_code: row.error_code };
}

async function placement(taskId: string) {
  const [row] = await sql<{ wip_admitted: unknown; queued_for_step_id: string | null }>(
    t.db,
    'SELECT wip_admitted, queued_for_step_id FROM tasks WHERE id = ?',
    [taskId],
  );
  return { admitted: row!.wip_admitted === true || Number(row!.wip_admitted) === 1, queued: row!.queued_for_step_id };
}

const sessionState = async (sessionId: string) =>
  (await sql<{ state: string }>(t.db, 'SELECT state FROM task_sessions WHERE id = ?', [sessionId]))[0]!.state;

describe('a launch that will not happen', () => {
  it('the agent profile changed after Begin: cancelled (launch_config_changed), nothing started, slot freed', async () => {
    const ws = await world(['true'], 1);
    const a = await created(ws, 'a');
    const b = await created(ws, 'b');
    // The profile changes before either launch: a's claim takes the slot, finds the command changed, abandons.
    await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
      canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo changed'] }),
      ws.agentProfileId,
    ]);
    expect(await launch(ws, a)).toBe('failed');
    expect(await claimOf(a.task.id)).toEqual({ state: 'cancelled', error_code: 'launch_config_changed' });
    expect(await sessionState(a.sessionId)).toBe('stopped');
    expect(await count(t.db, 'executors_running', 'task_id = ?', [a.task.id])).toBe(0);
    expect(await placement(a.task.id)).toEqual({ admitted: false, queued: null });
    expect((await readTaskDetail(t.db, a.task.id))!.launch_state).toBe('cancelled');
    // The slot a gave back is free for b (its launch is refused the same way, but it was admitted, not queued).
    expect(await launch(ws, b)).toBe('failed');
    expect(await claimOf(b.task.id)).toEqual({ state: 'cancelled', error_code: 'launch_config_changed' });
    // A repeated wake-up of a cancelled launch writes nothing and starts nothing.
    expect(await launch(ws, a)).toBe('skipped');
  });

  it('every start refused by the OS: after the last attempt, cancelled (retries_exhausted); the queue moves on', async () => {
    const ws = await world(['/nonexistent/agent-binary'], 1);
    const a = await created(ws, 'a');
    const b = await created(ws, 'b');
    expect(await launch(ws, a)).toBe('failed');
    expect(await claimOf(a.task.id)).toEqual({ state: 'retry_wait', error_code: 'spawn_refused' });
    // b waits behind a's slot (a's retry_wait keeps it: a later attempt may start).
    expect(await launch(ws, b)).toBe('queued');
    for (let i = 1; i < MAX_LAUNCH_ATTEMPTS; i++) expect(await launch(ws, a)).toBe('failed');
    const before = await claimOf(a.task.id);
    expect(before).toEqual({ state: 'retry_wait', error_code: 'spawn_refused' });
    const report = await recoverLaunchDispatches({
      db: t.db,
      queues: null,
      log: silentLogger(),
      actor: 'reaper:test',
      executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')),
      workspaceId: ws.workspaceId,
    });
    expect(report).toMatchObject({ exhausted: 1, woken: 0 });
    expect(await claimOf(a.task.id)).toEqual({ state: 'cancelled', error_code: 'retries_exhausted' });
    expect(await sessionState(a.sessionId)).toBe('stopped');
    expect(await placement(a.task.id)).toEqual({ admitted: false, queued: null });
    expect(await placement(b.task.id)).toEqual({ admitted: true, queued: null });
    // A second pass finds nothing more to cancel.
    const again = await recoverLaunchDispatches({
      db: t.db,
      queues: null,
      log: silentLogger(),
      actor: 'reaper:test',
      executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')),
      workspaceId: ws.workspaceId,
    });
    expect(again.exhausted).toBe(0);
  });
});

describe('a task marked done', () => {
  it('gives its slot to the oldest queued task, which then launches', async () => {
    const ws = await world(['true'], 1);
    const a = await created(ws, 'a');
    const b = await created(ws, 'b');
    const c = await created(ws, 'c');
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('queued');
    expect(await launch(ws, c)).toBe('queued');
    const done = await markTaskDone(t.db, a.task.id);
    expect(done.admitted).toEqual([b.task.id]);
    expect(await placement(a.task.id)).toEqual({ admitted: false, queued: null });
    expect(await launch(ws, b)).toBe('launched');
    expect(await launch(ws, c)).toBe('queued');
    // Marked done while queued: it leaves the queue and never launches, even when a slot frees up.
    await markTaskDone(t.db, c.task.id);
    expect(await placement(c.task.id)).toEqual({ admitted: false, queued: null });
    expect((await markTaskDone(t.db, b.task.id)).admitted).toEqual([]);
    expect(await launch(ws, c)).toBe('skipped');
    expect(await count(t.db, 'task_launch_dispatch_claims', 'task_id = ?', [c.task.id])).toBe(0);
  });

  it('cancels its launch that never started (task_done); a started one is left alone', async () => {
    const ws = await world(['/nonexistent/agent-binary'], 0);
    const a = await created(ws, 'a');
    expect(await launch(ws, a)).toBe('failed');
    expect(await claimOf(a.task.id)).toEqual({ state: 'retry_wait', error_code: 'spawn_refused' });
    await markTaskDone(t.db, a.task.id);
    expect(await claimOf(a.task.id)).toEqual({ state: 'cancelled', error_code: 'task_done' });
    expect(await sessionState(a.sessionId)).toBe('stopped');
    expect(await launch(ws, a)).toBe('skipped');

    await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
      canonicalJson({ kind: 'local', command: ['true'] }),
      ws.agentProfileId,
    ]);
    const b = await created(ws, 'b');
    expect(await launch(ws, b)).toBe('launched');
    await markTaskDone(t.db, b.task.id);
    expect(await claimOf(b.task.id)).toEqual({ state: 'succeeded', error_code: null });
  });
});

describe('an agent runtime before Complete', () => {
  it('is handed to a cleanup job that stops it; then the step is decided and the creation completes', async () => {
    const ws = await world(['true'], 0);
    const res = await begin(t.db, ws, {
      title: 'early agent',
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    });
    const steps = await sql<{ id: string; kind: string; step_key: string; generation: number | string }>(
      t.db,
      'SELECT id, kind, step_key, generation FROM task_creation_steps WHERE operation_id = ? ORDER BY kind',
      [res.operationId],
    );
    const effects = {
      db: t.db,
      dataDir: ws.dataDir,
      providers: createProviderRegistry({ timeoutMs: 2000 }),
      log: silentLogger(),
      timeoutMs: 5000,
    };
    const run = (row: (typeof steps)[number]) =>
      processStepJob(
        {
          effects,
          handlers: defaultStepHandlers,
          queues: null as never,
          log: silentLogger(),
          metrics: null,
          workerId: `worker-${randomUUID().slice(0, 6)}`,
          leaseMs: 60_000,
        },
        { operationId: res.operationId, stepId: row.id, kind: row.kind as never, stepKey: row.step_key, generation: 0 },
        `job-${row.id}`,
      );
    // The session step's claim committed and its worker died (a worker claims this ledger-only kind and records
    // it in one transaction, but the Store's two-commit claim remains, and an older release's worker used it);
    // everything else succeeds.
    for (const row of steps) {
      if (row.kind === 'session_prepare') {
        const auth = { kind: 'operation', operationId: res.operationId, actor: 'dead-worker' } as const;
        const claim = await claimTaskCreationStep(
          t.db,
          auth,
          { kind: 'session_prepare', stepKey: row.step_key },
          'dead',
        );
        expect(claim.generation).toBe(1);
      } else if (row.kind !== 'launch_intent') {
        expect(await run(row)).toBe('succeeded');
      }
    }
    const session = steps.find((s) => s.kind === 'session_prepare')!;
    // Something started an agent for the session before Complete (never the protocol): a real process carrying
    // the dispatch key, and its runtime row.
    const key = dispatchIdempotencyKey(res.operationId, session.step_key);
    const agent = spawn('sleep', ['120'], {
      detached: true,
      stdio: 'ignore',
      env: { ...process.env, TASKLEDGER_DISPATCH_KEY: key },
    });
    agent.unref();
    await new Promise((r) => setTimeout(r, 200));
    expect(findDispatchProcesses(key)).toHaveLength(1);
    await sql(
      t.db,
      `INSERT INTO executors_running (id, session_id, task_id, workspace_id, dispatch_claim_id, runtime_handle, pid, state, started_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'}, ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'})`,
      [
        randomUUID(),
        session.step_key,
        res.task.id,
        ws.workspaceId,
        randomUUID(),
        canonicalJson({ kind: 'local', host: hostname(), pid: agent.pid }),
        agent.pid!,
      ],
    );
    const past = t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE';
    await sql(t.db, `UPDATE task_creation_steps SET lease_expires_at = ${past} WHERE id = ?`, [session.id]);

    const reaper = {
      effects,
      handlers: defaultStepHandlers,
      queues: null,
      log: silentLogger(),
      actor: 'reaper:early',
      workspaceId: ws.workspaceId,
    };
    await sweepOnce(reaper);
    const [step] = await sql<{ state: string; error_code: string | null; error_json: string | null }>(
      t.db,
      'SELECT state, error_code, error_json FROM task_creation_steps WHERE id = ?',
      [session.id],
    );
    expect(step).toMatchObject({ state: 'unknown', error_code: 'conflict' });
    expect(step!.error_json).toContain('cleanup job');
    const jobs = await sql<{ id: string; reason: string; kind: string }>(
      t.db,
      'SELECT id, reason, kind FROM task_resource_cleanup_jobs WHERE task_id = ?',
      [res.task.id],
    );
    expect(jobs.map((j) => [j.kind, j.reason])).toEqual([['launch_dispatch', 'pre_complete_runtime']]);

    // The cleanup worker on this host stops the agent and removes the runtime row.
    await runDueCleanupJobs(
      { ...effects, executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')) },
      'cleaner',
      { workspaceId: ws.workspaceId },
    );
    expect(findDispatchProcesses(key)).toHaveLength(0);
    expect(await count(t.db, 'executors_running', 'session_id = ?', [session.step_key])).toBe(0);

    // The next look decides the step (no runtime, no session rows: absent -> retried) and the creation goes on.
    await sql(t.db, 'UPDATE task_creation_steps SET next_attempt_at = NULL WHERE id = ?', [session.id]);
    // (A fresh reaper: this one keeps the operation out for its in-memory back-off, as a live reaper would.)
    await sweepOnce({ ...reaper });
    const [after] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE id = ?', [
      session.id,
    ]);
    expect(after!.state).toBe('retry_wait');
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await sql(t.db, 'UPDATE task_creation_steps SET next_attempt_at = NULL WHERE id = ?', [session.id]);
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  });
});
