/**
 * MarkTaskDone and PromoteDeferredLaunch: a task marked done fires one
 * `task.dependencies_resolved` for each task whose last blocker it was (never
 * twice, never for a task still being created); the event's deferred start
 * promotes to exactly one session/launch pair that launches and verifies
 * clean. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { canonicalJson, parseCanonical } from '../../src/canonical/canonical-json';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { promoteDeferredLaunch } from '../../src/store/deferred-launch';
import { markTaskDone } from '../../src/store/task-done';
import type { BeginResult, OperationAuthority } from '../../src/store/types';
import { verifyLedger } from '../../src/verify/run';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, expectTyped, snapshot, stepRows } from '../support/ledger';
import { launchNow } from '../support/launch';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { effectDeps } from '../steps/support';

const t = useTestDb();

async function world(): Promise<SeededWorkspace> {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['true'] }),
    ws.agentProfileId,
  ]);
  return ws;
}

/** Begins and drives every step; completes unless told not to. */
async function created(ws: SeededWorkspace, body: Record<string, unknown>, complete = true): Promise<BeginResult> {
  const res = await begin(t.db, ws, body);
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  if (complete) expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  return res;
}

const deferred = (ws: SeededWorkspace, blockers: string[]) => ({
  title: 'blocked',
  blocked_by: blockers,
  start_agent: true,
  agent_profile_id: ws.agentProfileId,
});

const resolvedEvents = (taskId: string) =>
  sql<{ revision: number; operation_id: string; payload_json: string }>(
    t.db,
    "SELECT revision, operation_id, payload_json FROM event_outbox WHERE task_id = ? AND type = 'task.dependencies_resolved'",
    [taskId],
  );

const lifecycleOf = async (taskId: string) =>
  (await sql<{ lifecycle_state: string }>(t.db, 'SELECT lifecycle_state FROM tasks WHERE id = ?', [taskId]))[0]
    ?.lifecycle_state;

describe('MarkTaskDone', () => {
  it('marks a created task done; a repeat is already done and writes nothing', async () => {
    const ws = await world();
    const a = await created(ws, { title: 'a' });
    expect(await markTaskDone(t.db, a.task.id)).toEqual({
      admitted: [],
      task_id: a.task.id,
      workspace_id: ws.workspaceId,
      already_done: false,
      dependencies_resolved: [],
      resolution_pending: [],
    });
    expect(await lifecycleOf(a.task.id)).toBe('done');
    const before = await snapshot(t.db, a.operationId, a.task.id);
    expect((await markTaskDone(t.db, a.task.id)).already_done).toBe(true);
    expect(await snapshot(t.db, a.operationId, a.task.id)).toBe(before);
  });

  it('refuses an unknown task and one still being created, with zero writes', async () => {
    const ws = await world();
    await expectTyped(markTaskDone(t.db, '00000000-0000-4000-8000-000000000000'), 'not_found');
    const open = await begin(t.db, ws, { title: 'open' });
    const before = await snapshot(t.db, open.operationId, open.task.id);
    await expectTyped(markTaskDone(t.db, open.task.id), 'creation_state_conflict');
    expect(await snapshot(t.db, open.operationId, open.task.id)).toBe(before);
    expect(await lifecycleOf(open.task.id)).toBe('live');
  });

  it('resolves a blocked task only when its last blocker is done: one event, at revision two', async () => {
    const ws = await world();
    const b1 = await created(ws, { title: 'b1' });
    const b2 = await created(ws, { title: 'b2' });
    const d = await created(ws, deferred(ws, [b1.task.id, b2.task.id]));
    expect(d.task.start_policy).toBe('deferred');

    expect((await markTaskDone(t.db, b1.task.id)).dependencies_resolved).toEqual([]);
    expect(await resolvedEvents(d.task.id)).toHaveLength(0);
    expect((await markTaskDone(t.db, b2.task.id)).dependencies_resolved).toEqual([d.task.id]);
    const events = await resolvedEvents(d.task.id);
    expect(events).toHaveLength(1);
    expect(Number(events[0]!.revision)).toBe(2);
    expect(events[0]!.operation_id).toBe(d.operationId);
    expect(parseCanonical(events[0]!.payload_json)).toMatchObject({
      type: 'task.dependencies_resolved',
      task_id: d.task.id,
      revision: 2,
      start_policy: 'deferred',
      resolved_by: b2.task.id,
    });
    expect(await count(t.db, 'tasks', 'id = ? AND revision = 2', [d.task.id])).toBe(1);
    // No agent yet: the event's delivery promotes and launches.
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [d.task.id])).toBe(0);

    // verify: clean; then a lost resolution (the event gone, the task still awaiting) is reported.
    const check = () =>
      verifyLedger(
        { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
        { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
      );
    expect((await check()).drift).toEqual([]);
    await sql(t.db, 'UPDATE tasks SET awaits_blockers = ? WHERE id = ?', [true, d.task.id]);
    expect((await check()).drift.map((x) => `${x.code} ${x.operation_id} ${x.message}`)).toEqual([
      `task_state ${d.operationId} task.dependencies_resolved is written, but the task still awaits`,
    ]);
    await sql(t.db, "DELETE FROM event_outbox WHERE task_id = ? AND type = 'task.dependencies_resolved'", [d.task.id]);
    await sql(t.db, 'UPDATE tasks SET awaits_blockers = ? WHERE id = ?', [true, d.task.id]);
    expect((await check()).drift.map((x) => `${x.code} ${x.operation_id} ${x.message}`)).toEqual([
      `task_state ${d.operationId} every blocker is done, but the task still awaits them (no task.dependencies_resolved)`,
    ]);
  });

  it('two blockers marked done at once fire exactly one event', async () => {
    const ws = await world();
    const b1 = await created(ws, { title: 'b1' });
    const b2 = await created(ws, { title: 'b2' });
    const d = await created(ws, deferred(ws, [b1.task.id, b2.task.id]));
    const [r1, r2] = await Promise.all([markTaskDone(t.db, b1.task.id), markTaskDone(t.db, b2.task.id)]);
    expect([...r1.dependencies_resolved, ...r2.dependencies_resolved]).toEqual([d.task.id]);
    expect(await resolvedEvents(d.task.id)).toHaveLength(1);
  });

  it('a blocked task still being created when its last blocker is done gets its event from its own Complete', async () => {
    const ws = await world();
    const b = await created(ws, { title: 'b' });
    const d = await created(ws, deferred(ws, [b.task.id]), false);
    // Its workspace attachment succeeded: the edge exists, the creation is not complete.
    expect(await count(t.db, 'task_blockers', 'task_id = ? AND blocker_task_id = ?', [d.task.id, b.task.id])).toBe(1);
    expect(await markTaskDone(t.db, b.task.id)).toMatchObject({
      dependencies_resolved: [],
      resolution_pending: [d.task.id],
    });
    // No event may precede task.created.
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [d.task.id])).toBe(0);
    expect((await completeTaskCreation(t.db, { kind: 'handle', handle: d.handle! })).outcome).toBe('Created');
    const events = await sql<{ type: string; revision: number; payload_json: string }>(
      t.db,
      'SELECT type, revision, payload_json FROM event_outbox WHERE task_id = ? ORDER BY seq',
      [d.task.id],
    );
    expect(events.map((e) => `${e.type} ${Number(e.revision)}`)).toEqual([
      'task.created 1',
      'task.dependencies_resolved 2',
    ]);
    // Resolved while being created: no single blocker's done fired it.
    expect(parseCanonical(events[1]!.payload_json)).toMatchObject({ resolved_by: null, start_policy: 'deferred' });
    expect(await count(t.db, 'tasks', 'id = ? AND revision = 2 AND awaits_blockers = ?', [d.task.id, false])).toBe(1);
    // A replayed Complete writes nothing more.
    await completeTaskCreation(t.db, { kind: 'handle', handle: d.handle! });
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [d.task.id])).toBe(2);
  });

  it('a blocker marked done while its blocked task completes: exactly one event, whichever commits first', async () => {
    const ws = await world();
    for (let i = 0; i < 8; i++) {
      const b = await created(ws, { title: `b${i}` });
      const d = await created(ws, deferred(ws, [b.task.id]), false);
      // Staggered starts: done lands before, between and after Complete's phases across the iterations (each
      // order is also tested deterministically: above, and with a failpoint in test/fleet/deferred-start.test.ts).
      const [doneRes, completeRes] = await Promise.all([
        new Promise((r) => setTimeout(r, i * 6)).then(() => markTaskDone(t.db, b.task.id)),
        completeTaskCreation(t.db, { kind: 'handle', handle: d.handle! }),
      ]);
      expect(completeRes.outcome).toBe('Created');
      // Either done saw the task created (and fired), or it left the resolution to Complete.
      expect([...doneRes.dependencies_resolved, ...doneRes.resolution_pending]).toEqual([d.task.id]);
      const events = await sql<{ type: string; revision: number }>(
        t.db,
        'SELECT type, revision FROM event_outbox WHERE task_id = ? ORDER BY seq',
        [d.task.id],
      );
      expect(events.map((e) => `${e.type} ${Number(e.revision)}`)).toEqual([
        'task.created 1',
        'task.dependencies_resolved 2',
      ]);
      expect(await count(t.db, 'tasks', 'id = ? AND awaits_blockers = ? AND revision = 2', [d.task.id, false])).toBe(1);
    }
  });

  it('a blocker marked done before its blocked task even has the edge: the task resolves at its Complete', async () => {
    const ws = await world();
    const b = await created(ws, { title: 'b' });
    // Begun, not one step run: no task_blockers edge yet, so done cannot see the blocked task at all.
    const d = await begin(t.db, ws, deferred(ws, [b.task.id]));
    expect(await count(t.db, 'task_blockers', 'task_id = ?', [d.task.id])).toBe(0);
    expect(await markTaskDone(t.db, b.task.id)).toMatchObject({ dependencies_resolved: [], resolution_pending: [] });
    const auth: OperationAuthority = { kind: 'handle', handle: d.handle! };
    await driveAllSteps(t.db, auth, d.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    expect((await resolvedEvents(d.task.id)).map((e) => Number(e.revision))).toEqual([2]);
  });

  it('a task whose blockers were all done before it was created is never resolved (the spec promotes only from a later transition)', async () => {
    const ws = await world();
    const b = await created(ws, { title: 'b' });
    await markTaskDone(t.db, b.task.id);
    const d = await created(ws, deferred(ws, [b.task.id]));
    expect(d.task.start_policy).toBe('deferred');
    expect((await markTaskDone(t.db, b.task.id)).already_done).toBe(true);
    expect(await resolvedEvents(d.task.id)).toHaveLength(0);
  });
});

describe('PromoteDeferredLaunch', () => {
  it('refuses before the dependencies resolve and for an immediate start, with zero writes', async () => {
    const ws = await world();
    const b = await created(ws, { title: 'b' });
    const d = await created(ws, deferred(ws, [b.task.id]));
    const before = await snapshot(t.db, d.operationId, d.task.id);
    expect(await promoteDeferredLaunch(t.db, d.operationId, 'test')).toEqual({
      refused: 'its dependencies are not resolved',
    });
    expect(await snapshot(t.db, d.operationId, d.task.id)).toBe(before);
    const now = await created(ws, { title: 'now', start_agent: true, agent_profile_id: ws.agentProfileId });
    expect(await promoteDeferredLaunch(t.db, now.operationId, 'test')).toMatchObject({
      refused: expect.stringContaining('immediate'),
    });
  });

  it('materializes exactly one session/launch pair, launches it, and the ledger verifies clean', async () => {
    const ws = await world();
    const b = await created(ws, { title: 'b' });
    const d = await created(ws, deferred(ws, [b.task.id]));
    const planned = (await stepRows(t.db, d.operationId)).length;
    await markTaskDone(t.db, b.task.id);

    // Three promotions at once: one writes the pair, the others find it.
    const results = await Promise.all([1, 2, 3].map(() => promoteDeferredLaunch(t.db, d.operationId, 'test')));
    const promoted = results.filter((r) => 'promoted' in r && r.promoted);
    expect(promoted).toHaveLength(1);
    const sessionId = (promoted[0] as { sessionId: string }).sessionId;
    expect(results.every((r) => 'sessionId' in r && r.sessionId === sessionId)).toBe(true);
    const steps = await stepRows(t.db, d.operationId);
    expect(steps).toHaveLength(planned + 2);
    expect(steps.filter((s) => s.step_key === sessionId).map((s) => `${s.kind} ${s.state}`)).toEqual([
      'launch_intent armed',
      'session_prepare succeeded',
    ]);
    expect(
      await count(t.db, 'task_sessions', "task_id = ? AND id = ? AND state = 'prepared'", [d.task.id, sessionId]),
    ).toBe(1);

    const launched = await launchNow(
      t.db,
      ws.dataDir,
      { operationId: d.operationId, taskId: d.task.id, sessionId },
      'done-test',
    );
    expect(launched).toBe('launched');
    expect(await count(t.db, 'task_launch_dispatch_claims', "task_id = ? AND state = 'succeeded'", [d.task.id])).toBe(
      1,
    );

    const report = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: true, maxDrift: 100, pageSize: 50 },
    );
    expect(report.drift).toEqual([]);
    expect(report.counts.dispatch_claims).toBe(1);

    // Without its resolution event, the pair and the launch are drift.
    await sql(t.db, "DELETE FROM event_outbox WHERE task_id = ? AND type = 'task.dependencies_resolved'", [d.task.id]);
    const tampered = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(tampered.drift.map((x) => `${x.code} ${x.operation_id}`).sort()).toEqual([
      `launch_before_event ${d.operationId}`,
      `step_set ${d.operationId}`,
    ]);

    // A resolution event whose creation operation the ledger does not hold is an orphan.
    const ghost = '00000000-0000-4000-8000-00000000abcd';
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at)
       VALUES (?, ?, ?, 2, 'task.dependencies_resolved', ?, '{}', ?, ${now})`,
      [
        '00000000-0000-4000-8000-00000000ef01',
        ws.workspaceId,
        '00000000-0000-4000-8000-00000000ef02',
        ghost,
        'e'.repeat(64),
      ],
    );
    const orphaned = await verifyLedger(
      { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(orphaned.drift.filter((x) => x.code === 'orphan_row').map((x) => x.operation_id)).toEqual([ghost]);
  });
});
