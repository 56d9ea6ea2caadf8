/**
 * The WIP gate at launch and its promotion (store/wip-admission.ts): a step
 * with a limit admits that many launches; the next ones wait in its queue,
 * oldest first, and a slot freed by a move or a deletion admits them. Moves
 * refuse what they must with zero writes. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { deletionJobBuilder } from '../../src/lifecycle/deletion-jobs';
import { claimLaunchDispatch } from '../../src/store/launch-dispatch';
import { completeTaskCreation } from '../../src/store/complete';
import { deleteTask } from '../../src/store/task-delete';
import { moveTask } from '../../src/store/task-move';
import type { BeginResult, OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps, expectTyped, snapshot } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb(20);

async function world(limit: number): Promise<SeededWorkspace> {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['true'] }),
    ws.agentProfileId,
  ]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = ? WHERE id = ?', [limit, ws.stepIds[1]!]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 0 WHERE id = ?', [ws.stepIds[0]!]);
  return ws;
}

interface Created extends BeginResult {
  sessionId: string | null;
}

async function created(ws: SeededWorkspace, body: Record<string, unknown>): Promise<Created> {
  const res = await begin(t.db, ws, body);
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  const [intent] = await sql<{ step_key: string }>(
    t.db,
    "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
    [res.operationId],
  );
  return { ...res, sessionId: intent?.step_key ?? null };
}

const withAgent = (ws: SeededWorkspace, step: string, title = 'agent task') => ({
  title,
  start_agent: true,
  agent_profile_id: ws.agentProfileId,
  workflow_step_id: step,
});

const launch = (ws: SeededWorkspace, c: Created) =>
  launchNow(t.db, ws.dataDir, { operationId: c.operationId, taskId: c.task.id, sessionId: c.sessionId! });

async function placement(taskId: string) {
  const [row] = await sql<{
    workflow_step_id: string;
    wip_admitted: unknown;
    queued_for_step_id: string | null;
    admitted_at: unknown;
    queued_at: unknown;
  }>(
    t.db,
    'SELECT workflow_step_id, wip_admitted, queued_for_step_id, admitted_at, queued_at FROM tasks WHERE id = ?',
    [taskId],
  );
  return {
    step: row!.workflow_step_id,
    admitted: row!.wip_admitted === true || Number(row!.wip_admitted) === 1,
    queued: row!.queued_for_step_id,
  };
}

const launched = (taskId: string) =>
  count(t.db, 'task_launch_dispatch_claims', "task_id = ? AND state = 'succeeded'", [taskId]);

const jobs = (ws: SeededWorkspace) => ({ requestedBy: 'tester', jobs: deletionJobBuilder(ws.dataDir) });

describe('the WIP gate at launch', () => {
  it('admits up to the limit; the rest wait in the step queue, and nothing is claimed for them', async () => {
    const ws = await world(1);
    const a = await created(ws, withAgent(ws, ws.stepIds[1]!, 'a'));
    const b = await created(ws, withAgent(ws, ws.stepIds[1]!, 'b'));
    expect(await launch(ws, a)).toBe('launched');
    expect(await placement(a.task.id)).toEqual({ step: ws.stepIds[1], admitted: true, queued: null });
    expect(await launch(ws, b)).toBe('queued');
    expect(await placement(b.task.id)).toEqual({ step: ws.stepIds[1], admitted: false, queued: ws.stepIds[1] });
    expect(await count(t.db, 'task_launch_dispatch_claims', 'task_id = ?', [b.task.id])).toBe(0);
    // A repeated wake-up keeps it queued, in its place.
    const [before] = await sql<{ queued_at: unknown }>(t.db, 'SELECT queued_at FROM tasks WHERE id = ?', [b.task.id]);
    expect(await launch(ws, b)).toBe('queued');
    const [after] = await sql<{ queued_at: unknown }>(t.db, 'SELECT queued_at FROM tasks WHERE id = ?', [b.task.id]);
    expect(String(after!.queued_at)).toBe(String(before!.queued_at));
  });

  it('an unlimited step admits every launch; a task without an agent takes no slot', async () => {
    const ws = await world(1);
    const a = await created(ws, withAgent(ws, ws.stepIds[0]!, 'a'));
    const b = await created(ws, withAgent(ws, ws.stepIds[0]!, 'b'));
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('launched');
    const plain = await created(ws, { title: 'no agent', workflow_step_id: ws.stepIds[1] });
    expect(await placement(plain.task.id)).toEqual({ step: ws.stepIds[1], admitted: false, queued: null });
  });

  it('sixteen concurrent claims into a limit-1 step admit exactly one', async () => {
    const ws = await world(1);
    const tasks: Created[] = [];
    for (let i = 0; i < 16; i++) tasks.push(await created(ws, withAgent(ws, ws.stepIds[1]!, `t${i}`)));
    const results = await Promise.all(
      tasks.map((c, i) =>
        claimLaunchDispatch(t.db, { operationId: c.operationId, sessionId: c.sessionId! }, `w${i}`, 60_000),
      ),
    );
    expect(results.filter((r) => 'dispatchId' in r)).toHaveLength(1);
    expect(results.filter((r) => 'queued' in r)).toHaveLength(15);
    expect(await count(t.db, 'tasks', 'workflow_step_id = ? AND wip_admitted = ?', [ws.stepIds[1]!, true])).toBe(1);
    expect(await count(t.db, 'tasks', 'queued_for_step_id = ?', [ws.stepIds[1]!])).toBe(15);
    expect(await count(t.db, 'task_launch_dispatch_claims', 'workspace_id = ?', [ws.workspaceId])).toBe(1);
  });
});

describe('the admission lock chosen before the placement is read', () => {
  it('a step this process saw unlimited that has a limit now: the claims start over with its lock, slots hold', async () => {
    const ws = await world(1);
    const step = ws.stepIds[1]!;
    // This process launches into the step while it has no limit, and remembers it so.
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 0 WHERE id = ?', [step]);
    const first = await created(ws, withAgent(ws, step, 'first'));
    expect(await launch(ws, first)).toBe('launched');
    // A limit of two is set: one slot is left, and eight claims race for it, each guessing "no limit" first.
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 2 WHERE id = ?', [step]);
    const tasks: Created[] = [];
    for (let i = 0; i < 8; i++) tasks.push(await created(ws, withAgent(ws, step, `t${i}`)));
    const results = await Promise.all(
      tasks.map((c, i) =>
        claimLaunchDispatch(t.db, { operationId: c.operationId, sessionId: c.sessionId! }, `w${i}`, 60_000),
      ),
    );
    expect(results.filter((r) => 'dispatchId' in r)).toHaveLength(1);
    expect(results.filter((r) => 'queued' in r)).toHaveLength(7);
    expect(await count(t.db, 'tasks', 'workflow_step_id = ? AND wip_admitted = ?', [step, true])).toBe(2);
    expect(await count(t.db, 'tasks', 'queued_for_step_id = ?', [step])).toBe(7);
  });
});

describe('promotion', () => {
  it('a move out of the step admits the oldest queued task, which then launches once', async () => {
    const ws = await world(1);
    const [a, b, c] = [
      await created(ws, withAgent(ws, ws.stepIds[1]!, 'a')),
      await created(ws, withAgent(ws, ws.stepIds[1]!, 'b')),
      await created(ws, withAgent(ws, ws.stepIds[1]!, 'c')),
    ];
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('queued');
    expect(await launch(ws, c)).toBe('queued');

    const moved = await moveTask(t.db, a.task.id, ws.stepIds[0]!);
    expect(moved).toMatchObject({ moved: true, wip_admitted: true, queued_for_step_id: null, admitted: [b.task.id] });
    expect(await placement(a.task.id)).toEqual({ step: ws.stepIds[0], admitted: true, queued: null });
    expect(await placement(b.task.id)).toEqual({ step: ws.stepIds[1], admitted: true, queued: null });
    expect(await placement(c.task.id)).toEqual({ step: ws.stepIds[1], admitted: false, queued: ws.stepIds[1] });
    expect(await launch(ws, b)).toBe('launched');
    expect(await launch(ws, b)).toBe('skipped');
    expect(await launched(b.task.id)).toBe(1);
    expect(await launch(ws, c)).toBe('queued');
  });

  it('moving into a full step queues the task; its promotion admits it without a second launch', async () => {
    const ws = await world(1);
    const a = await created(ws, withAgent(ws, ws.stepIds[1]!, 'a'));
    const b = await created(ws, withAgent(ws, ws.stepIds[0]!, 'b'));
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('launched');
    const moved = await moveTask(t.db, b.task.id, ws.stepIds[1]!);
    expect(moved).toMatchObject({ moved: true, wip_admitted: false, queued_for_step_id: ws.stepIds[1], admitted: [] });
    const back = await moveTask(t.db, a.task.id, ws.stepIds[0]!);
    expect(back.admitted).toEqual([b.task.id]);
    expect(await placement(b.task.id)).toEqual({ step: ws.stepIds[1], admitted: true, queued: null });
    expect(await launched(b.task.id)).toBe(1);
  });

  it('deleting the admitted task admits the next queued one', async () => {
    const ws = await world(1);
    const a = await created(ws, withAgent(ws, ws.stepIds[1]!, 'a'));
    const b = await created(ws, withAgent(ws, ws.stepIds[1]!, 'b'));
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('queued');
    const res = await deleteTask(t.db, a.task.id, jobs(ws));
    expect(res).toMatchObject({ deleted: true, admitted: [b.task.id] });
    expect(await launch(ws, b)).toBe('launched');
  });

  it('a move racing a promotion leaves one task per slot', async () => {
    const ws = await world(1);
    const a = await created(ws, withAgent(ws, ws.stepIds[1]!, 'a'));
    const b = await created(ws, withAgent(ws, ws.stepIds[1]!, 'b'));
    const c = await created(ws, withAgent(ws, ws.stepIds[0]!, 'c'));
    expect(await launch(ws, a)).toBe('launched');
    expect(await launch(ws, b)).toBe('queued');
    expect(await launch(ws, c)).toBe('launched');
    // a leaves (promoting b) while c enters: whichever commits second finds the slot taken.
    await Promise.all([moveTask(t.db, a.task.id, ws.stepIds[0]!), moveTask(t.db, c.task.id, ws.stepIds[1]!)]);
    expect(await count(t.db, 'tasks', 'workflow_step_id = ? AND wip_admitted = ?', [ws.stepIds[1]!, true])).toBe(1);
    expect(await count(t.db, 'tasks', 'queued_for_step_id = ?', [ws.stepIds[1]!])).toBe(1);
  });
});

describe('MoveTask refusals', () => {
  it('refuse with zero writes: unknown step, another workflow, a task still being created, a deleted one', async () => {
    const ws = await world(1);
    const a = await created(ws, { title: 'a' });
    const snap = () => snapshot(t.db, a.operationId, a.task.id);
    const before = await snap();
    await expectTyped(moveTask(t.db, a.task.id, '00000000-0000-4000-8000-000000000000'), 'not_found');
    const otherWorkflow = await seedWorkspace(t.db);
    await expectTyped(moveTask(t.db, a.task.id, otherWorkflow.stepIds[0]!), 'not_found');
    const wf = randomUUID();
    const step = randomUUID();
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(t.db, `INSERT INTO workflows (id, workspace_id, name, created_at) VALUES (?, ?, 'other', ${now})`, [
      wf,
      ws.workspaceId,
    ]);
    await sql(
      t.db,
      `INSERT INTO workflow_steps (id, workflow_id, workspace_id, name, position, wip_limit, auto_start, created_at)
       VALUES (?, ?, ?, 'x', 0, 0, ?, ${now})`,
      [step, wf, ws.workspaceId, false],
    );
    await expectTyped(moveTask(t.db, a.task.id, step), 'workflow_mismatch');
    expect(await snap()).toBe(before);

    const open = await begin(t.db, ws, { title: 'open' });
    await expectTyped(moveTask(t.db, open.task.id, ws.stepIds[1]!), 'creation_state_conflict');
    expect((await moveTask(t.db, a.task.id, ws.stepIds[0]!)).moved).toBe(false);
    expect(await snap()).toBe(before);
    await deleteTask(t.db, a.task.id, jobs(ws));
    await expectTyped(moveTask(t.db, a.task.id, ws.stepIds[1]!), 'task_deleted');
  });
});
