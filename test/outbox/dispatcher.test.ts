/**
 * The outbox dispatcher's pass: every undelivered event of the workspace (or,
 * right after a Complete, of that one creation) in sequence order, each launch event's agent started (here: in place) before
 * the event is marked; and an event another process's pass marked delivered
 * after this pass read its batch is skipped, with no second launch attempt
 * and no mark. A deferred start's `task.dependencies_resolved` is promoted
 * and launched; one whose promotion the ledger refuses holds up no other
 * event and is itself held undelivered (not consumed), verify reports it,
 * and once the contradiction is gone the next pass launches and delivers
 * it. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LAUNCH_QUEUE, type LaunchJob } from '../../queues/names';
import { silentLogger } from '../../src/log';
import { processOutboxJob, type OutboxEvent } from '../../src/outbox/dispatcher';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { claimLaunchDispatch } from '../../src/store/launch-dispatch';
import type { OutboxMark } from '../../src/store/outbox-mark';
import { markTaskDone } from '../../src/store/task-done';
import { verifyLedger } from '../../src/verify/run';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { effectDeps } from '../steps/support';
import { launchNow } from '../support/launch';
import { useTestQueues } from '../support/queues';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

/** Another process's launch takes the operation's dispatch claim (owner `other`) and is starting its agent. */
async function takeLaunchClaim(operationId: string): Promise<void> {
  const [intent] = await sql<{ step_key: string }>(
    t.db,
    "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
    [operationId],
  );
  const claim = await claimLaunchDispatch(t.db, { operationId, sessionId: intent!.step_key }, 'other', 30_000);
  expect('dispatchId' in claim).toBe(true);
}

const { queues } = useTestQueues('dispatcher');

/** A completed creation whose task.created is still undelivered; returns its operation id. */
async function completed(ws: SeededWorkspace, startAgent: boolean): Promise<string> {
  const res = await begin(t.db, ws, startAgent ? { start_agent: true, agent_profile_id: ws.agentProfileId } : {});
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  return res.operationId;
}

/** A dispatcher's deps whose subscriber records every event it is handed. */
const passDeps = (seen: OutboxEvent[]) => ({
  db: t.db,
  queues,
  log: silentLogger(),
  metrics: null,
  subscribers: [(e: OutboxEvent) => seen.push(e)],
});

const undelivered = (ws: SeededWorkspace) =>
  count(t.db, 'event_outbox', 'workspace_id = ? AND delivered_at IS NULL', [ws.workspaceId]);

describe('outbox dispatcher', () => {
  it('delivers every event in order and starts each launch before marking it', async () => {
    const ws = await seedWorkspace(t.db);
    const ops = [await completed(ws, true), await completed(ws, false), await completed(ws, true)];
    const launched: string[] = [];
    const seen: OutboxEvent[] = [];
    const launchInPlace = async (job: LaunchJob) => {
      // The event is not marked yet while its agent starts.
      expect(await count(t.db, 'event_outbox', 'operation_id = ? AND delivered_at IS NULL', [job.operationId])).toBe(1);
      launched.push(job.operationId);
    };
    const deps = passDeps(seen);
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(3);
    expect(launched).toEqual([ops[0], ops[2]]);
    expect(seen.map((e) => e.operation_id)).toEqual(ops);
    expect(await undelivered(ws)).toBe(0);
  });

  it("an operation's own pass (right after its Complete) delivers its events only; the workspace pass the rest", async () => {
    const ws = await seedWorkspace(t.db);
    const ops = [await completed(ws, true), await completed(ws, true), await completed(ws, false)];
    const launched: string[] = [];
    const seen: OutboxEvent[] = [];
    const launchInPlace = async (job: LaunchJob) => void launched.push(job.operationId);
    const deps = passDeps(seen);
    const scoped = { workspaceId: ws.workspaceId, operationId: ops[1]! };
    expect(await processOutboxJob(deps, scoped, { launchInPlace })).toBe(1);
    expect(launched).toEqual([ops[1]]);
    expect(seen.map((e) => e.operation_id)).toEqual([ops[1]]);
    expect(await undelivered(ws)).toBe(2);
    // Asked again, it has nothing left to do.
    expect(await processOutboxJob(deps, scoped, { launchInPlace })).toBe(0);
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(2);
    expect(launched).toEqual([ops[1], ops[0]]);
    expect(seen.map((e) => e.operation_id)).toEqual([ops[1], ops[0], ops[2]]);
    expect(await undelivered(ws)).toBe(0);
  });

  it('skips an event another pass marked after this one read it: no second launch, no mark', async () => {
    const ws = await seedWorkspace(t.db);
    const [first, second] = [await completed(ws, true), await completed(ws, true)];
    const launched: string[] = [];
    const launchInPlace = async (job: LaunchJob) => {
      launched.push(job.operationId);
      // Meanwhile another process's pass delivers the second event.
      await sql(
        t.db,
        'UPDATE event_outbox SET delivered_at = created_at, delivery_attempts = 1 WHERE operation_id = ?',
        [second],
      );
    };
    const launchJobsBefore = (await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0;
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(1);
    expect(launched).toEqual([first]);
    expect((await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0).toBe(launchJobsBefore);
    const [row] = await sql<{ delivery_attempts: number | string }>(
      t.db,
      'SELECT delivery_attempts FROM event_outbox WHERE operation_id = ?',
      [second],
    );
    expect(Number(row!.delivery_attempts)).toBe(1);
    expect(await undelivered(ws)).toBe(0);
  });

  it('leaves a launch whose dispatch claim another process holds to that claim: no launch attempt, event delivered', async () => {
    const ws = await seedWorkspace(t.db);
    const [taken, free] = [await completed(ws, true), await completed(ws, true)];
    // Another process's pass took the first launch's dispatch claim and is starting its agent.
    await takeLaunchClaim(taken);
    const launched: string[] = [];
    const launchInPlace = (job: LaunchJob) => Promise.resolve(launched.push(job.operationId));
    const launchJobsBefore = (await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0;
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(2);
    expect(launched).toEqual([free]);
    expect((await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0).toBe(launchJobsBefore);
    expect(await undelivered(ws)).toBe(0);
    const [row] = await sql<{ state: string; lease_owner: string }>(
      t.db,
      'SELECT state, lease_owner FROM task_launch_dispatch_claims WHERE creation_operation_id = ?',
      [taken],
    );
    expect(row).toEqual({ state: 'running', lease_owner: 'other' });
  });
});

describe("an operation's own pass", () => {
  it('reads its event and armed intents in one round trip, and leaves a claim another process holds to it', async () => {
    const ws = await seedWorkspace(t.db);
    const taken = await completed(ws, true);
    await takeLaunchClaim(taken);
    const launched: string[] = [];
    const launchInPlace = (job: LaunchJob) => Promise.resolve(launched.push(job.operationId));
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    const trips = countRoundTrips(t.db);
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId, operationId: taken }, { launchInPlace })).toBe(
      1,
    );
    const calls = trips.calls;
    vi.restoreAllMocks();
    // The event with its intents, then the mark: no second read before the launch decision.
    expect(calls).toBe(2);
    expect(launched).toEqual([]);
    expect(await undelivered(ws)).toBe(0);
    // Without a claim in the way, the launch runs in place from that same read.
    const free = await completed(ws, true);
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId, operationId: free }, { launchInPlace })).toBe(1);
    expect(launched).toEqual([free]);
  });
});

describe("phase B's hand-over to its delivery pass", () => {
  it("reads the event and its armed intent in COMMIT's round trip; the pass then only marks it", async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    const done = await completeTaskCreation(t.db, auth);
    const events = await done.events;
    const [intent] = await sql<{ step_key: string }>(
      t.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
      [res.operationId],
    );
    expect(events).toEqual([
      expect.objectContaining({
        event_id: done.eventId,
        type: 'task.created',
        operation_id: res.operationId,
        delivered_at: null,
        step_key: intent!.step_key,
        dispatch_state: null,
      }),
    ]);
    // A replayed Complete committed nothing: it hands nothing over.
    expect((await completeTaskCreation(t.db, auth)).events).toBeUndefined();
    const launched: string[] = [];
    const launchInPlace = (job: LaunchJob) => Promise.resolve(launched.push(job.operationId));
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    const trips = countRoundTrips(t.db);
    const job = { workspaceId: ws.workspaceId, operationId: res.operationId };
    expect(await processOutboxJob(deps, job, { launchInPlace }, events)).toBe(1);
    const calls = trips.calls;
    vi.restoreAllMocks();
    // No read: the launch decision comes from phase B's rows; the mark is the pass's one round trip.
    expect(calls).toBe(1);
    expect(launched).toEqual([res.operationId]);
    expect(await undelivered(ws)).toBe(0);
  });
});

describe('a launch run in place by a delivery', () => {
  it('marks the event with its launch record, in the same round trip', async () => {
    const ws = await seedWorkspace(t.db);
    const op = await completed(ws, true);
    const [event] = await sql<{ event_id: string }>(t.db, 'SELECT event_id FROM event_outbox WHERE operation_id = ?', [
      op,
    ]);
    const [intent] = await sql<{ step_key: string }>(
      t.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
      [op],
    );
    const results: string[] = [];
    const launchInPlace = async (job: LaunchJob, mark?: OutboxMark) =>
      results.push(await launchNow(t.db, ws.dataDir, job, 'in-place', mark));
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    const trips = countRoundTrips(t.db, event!.event_id);
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId, operationId: op }, { launchInPlace })).toBe(1);
    const texts = trips.texts;
    vi.restoreAllMocks();
    expect(results).toEqual(['launched']);
    // The only statement naming the event is its mark, sent with the launch record (which names the session).
    expect(texts).toHaveLength(1);
    expect(texts[0]).toContain(intent!.step_key);
    expect(await undelivered(ws)).toBe(0);
    expect(await count(t.db, 'executors_running', 'session_id = ?', [intent!.step_key])).toBe(1);

    // The ledger agrees: the event delivered once, the launch recorded (launches that do not run, or run without
    // marking, leave the mark to the pass: the tests above, whose in-place launches never mark).
    const report = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(report.drift).toEqual([]);
  });
});

describe('a deferred start on delivery', () => {
  it('is promoted and launched; one the ledger refuses is held (not consumed), holds up no other event, and launches once fixed', async () => {
    const ws = await seedWorkspace(t.db);
    const blockerTask = async (): Promise<string> => {
      const op = await completed(ws, false);
      const [row] = await sql<{ task_id: string }>(t.db, 'SELECT task_id FROM task_creation_operations WHERE id = ?', [
        op,
      ]);
      return row!.task_id;
    };
    const deferred = async (blocker: string): Promise<{ operationId: string; taskId: string }> => {
      const res = await begin(t.db, ws, {
        blocked_by: [blocker],
        start_agent: true,
        agent_profile_id: ws.agentProfileId,
      });
      const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
      await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
      expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
      return { operationId: res.operationId, taskId: res.task.id };
    };
    const [goodBlocker, badBlocker] = [await blockerTask(), await blockerTask()];
    const good = await deferred(goodBlocker);
    const bad = await deferred(badBlocker);
    // The bad one's event comes first in the outbox, so the good one's delivery follows a refused promotion.
    await markTaskDone(t.db, badBlocker);
    await markTaskDone(t.db, goodBlocker);
    // The bad one's session row already exists, owned by someone else: its promotion is not a clean slate.
    const plan = (
      await sql<{ plan_json: string }>(t.db, 'SELECT plan_json FROM task_creation_operations WHERE id = ?', [
        bad.operationId,
      ])
    )[0]!;
    const sessionId = (JSON.parse(plan.plan_json) as { deferred_launch: { session_id: string } }).deferred_launch
      .session_id;
    const [env] = await sql<{ id: string }>(t.db, 'SELECT id FROM task_environments WHERE task_id = ?', [bad.taskId]);
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO task_sessions (id, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id,
                                  launch_config_sha256, state, operation_id, step_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, 'local', 'foreign', ?, ?, 'prepared', ?, ?, ${now}, ${now})`,
      [sessionId, bad.taskId, ws.workspaceId, env!.id, ws.agentProfileId, 'f'.repeat(64), randomUUID(), randomUUID()],
    );
    const launched: string[] = [];
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    await processOutboxJob(
      deps,
      { workspaceId: ws.workspaceId },
      {
        launchInPlace: async (job: LaunchJob) => {
          launched.push(job.operationId);
        },
      },
    );
    expect(launched.sort()).toEqual([good.operationId]);
    // The refused start's event is held, not consumed; everything else was delivered.
    expect(await undelivered(ws)).toBe(1);
    const [held] = await sql<{ delivered_at: unknown; delivery_attempts: number | string }>(
      t.db,
      "SELECT delivered_at, delivery_attempts FROM event_outbox WHERE task_id = ? AND type = 'task.dependencies_resolved'",
      [bad.taskId],
    );
    expect({ delivered: held!.delivered_at !== null, attempts: Number(held!.delivery_attempts) }).toEqual({
      delivered: false,
      attempts: 1,
    });
    expect(await count(t.db, 'task_creation_steps', 'operation_id = ?', [bad.operationId])).toBe(
      (await count(t.db, 'task_creation_steps', 'operation_id = ?', [good.operationId])) - 2,
    );

    const report = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(report.drift.map((d) => `${d.code} ${d.operation_id} ${d.message}`)).toEqual([
      `step_set ${bad.operationId} task.dependencies_resolved is held undelivered after 1 attempt(s): the ledger refused its deferred start's promotion`,
    ]);

    // The operator removes the foreign session row: the next pass promotes, launches and delivers it.
    await sql(t.db, 'DELETE FROM task_sessions WHERE id = ?', [sessionId]);
    await processOutboxJob(
      deps,
      { workspaceId: ws.workspaceId },
      {
        launchInPlace: async (job: LaunchJob) => {
          launched.push(job.operationId);
        },
      },
    );
    expect(launched.sort()).toEqual([good.operationId, bad.operationId].sort());
    expect(await undelivered(ws)).toBe(0);
    const clean = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(clean.drift).toEqual([]);
  });
});
