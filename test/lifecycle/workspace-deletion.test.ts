/**
 * The workspace deletion cascade on a workspace holding every kind of
 * creation: created tasks (one with a running agent and a worktree, one
 * queued for a WIP slot, one whose launch claim is in flight), a creation
 * between its Complete phases, one still preparing with an effect made, and
 * one with a step in flight. Each is handled once, atomically: deleted with
 * its task.deleted, finished then deleted (task.created, then task.deleted),
 * aborted with its effects transferred, or left for later while its step
 * runs. The cleanup worker then stops the agent and removes the worktrees;
 * the workspace ends `deleted` and refuses creates. A crash between
 * creations replays without doing anything twice. Both dialects.
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { armFailpoint, disarmFailpoint } from '../../src/failpoints';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { runWorkspaceDeletion } from '../../src/lifecycle/workspace-deletion-runner';
import { silentLogger } from '../../src/log';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandler } from '../../src/kinds/contract';
import { completeTaskCreation, completeTaskCreationPhaseA } from '../../src/store/complete';
import { claimLaunchDispatch } from '../../src/store/launch-dispatch';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import type { BeginResult, OperationAuthority } from '../../src/store/types';
import { readWorkspaceDeletion, requestWorkspaceDeletion } from '../../src/store/workspace-deletion';
import { verifyLedger } from '../../src/verify/run';
import { realDeps, seeded, useFakeProvider } from '../compensation/support';
import { count, sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps, expectTyped, stepRows } from '../support/ledger';
import type { SeededWorkspace } from '../support/seed';

const t = useTestDb(12);
const fake = useFakeProvider();
let pr = 900;

async function world(): Promise<SeededWorkspace> {
  const ws = await seeded(t.db, fake.server, ++pr);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['sleep', '120'] }),
    ws.agentProfileId,
  ]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 1 WHERE id = ?', [ws.stepIds[1]!]);
  return ws;
}

const auth = (r: BeginResult): OperationAuthority => ({ kind: 'handle', handle: r.handle! });

async function sessionOf(operationId: string): Promise<string> {
  const [row] = await sql<{ step_key: string }>(
    t.db,
    "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
    [operationId],
  );
  return row!.step_key;
}

async function createdWithAgent(ws: SeededWorkspace, step: string, extra: Record<string, unknown> = {}) {
  const r = await begin(t.db, ws, {
    title: 'agent',
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workflow_step_id: step,
    ...extra,
  });
  await driveAllSteps(t.db, auth(r), r.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth(r))).outcome).toBe('Created');
  return { r, sessionId: await sessionOf(r.operationId) };
}

async function claimOnly(r: BeginResult, kind: string, owner = 'worker-x') {
  const rows = await stepRows(t.db, r.operationId);
  const row = rows.find((s) => s.kind === kind)!;
  return claimTaskCreationStep(t.db, auth(r), { kind: row.kind as never, stepKey: row.step_key }, owner);
}

/** The creations the runner announced as ended (the fleet publishes them to waiting requests). */
const announced: string[] = [];
const runner = (ws: SeededWorkspace) => ({
  db: t.db,
  dataDir: ws.dataDir,
  log: silentLogger(),
  announceEnded: (operationId: string) => {
    announced.push(operationId);
    return Promise.resolve();
  },
});

async function cleanAll(ws: SeededWorkspace, passes = 5) {
  const deps = { ...realDeps(t.db, ws.dataDir), executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')) };
  for (let i = 0; i < passes; i++) {
    await runDueCleanupJobs(deps, 'cleaner', { workspaceId: ws.workspaceId });
    await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE workspace_id = ?', [
      ws.workspaceId,
    ]);
  }
}

const events = (taskId: string) =>
  sql<{ type: string; revision: number }>(
    t.db,
    'SELECT type, revision FROM event_outbox WHERE task_id = ? ORDER BY seq',
    [taskId],
  ).then((rows) => rows.map((e) => `${e.type}@${Number(e.revision)}`));

describe('the workspace deletion cascade', () => {
  it('handles every kind of creation once, leaves nothing running or on disk, and ends the workspace', async () => {
    const ws = await world();
    // A: created, its agent running in its worktree, holding the step's one WIP slot.
    const a = await createdWithAgent(ws, ws.stepIds[1]!, {
      repositories: [{ repository_id: ws.repositoryId }],
      external_id: 'ext-a',
    });
    expect(
      await launchNow(t.db, ws.dataDir, { operationId: a.r.operationId, taskId: a.r.task.id, sessionId: a.sessionId }),
    ).toBe('launched');
    // B: created, queued for the slot A holds.
    const b = await createdWithAgent(ws, ws.stepIds[1]!);
    expect(
      await launchNow(t.db, ws.dataDir, { operationId: b.r.operationId, taskId: b.r.task.id, sessionId: b.sessionId }),
    ).toBe('queued');
    // F: created, its launch claimed by a worker that has not started it (a short lease).
    const f = await createdWithAgent(ws, ws.stepIds[0]!);
    const claim = await claimLaunchDispatch(
      t.db,
      { operationId: f.r.operationId, sessionId: f.sessionId },
      `${hostname()}:1:a`,
      1,
    );
    expect('dispatchId' in claim).toBe(true);
    // C: between its Complete phases.
    const c = await begin(t.db, ws, { title: 'c' });
    await driveAllSteps(t.db, auth(c), c.operationId, ws.dataDir);
    expect(await completeTaskCreationPhaseA(t.db, auth(c))).toBe('completing');
    // D: preparing, its worktree made, its launch not yet armed.
    const d = await begin(t.db, ws, {
      title: 'd',
      repositories: [{ repository_id: ws.repositoryId }],
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
      external_id: 'ext-d',
    });
    const dClaim = await claimOnly(d, 'fresh_branch_prepare');
    expect(
      await (defaultStepHandlers.fresh_branch_prepare as StepHandler).perform(
        realDeps(t.db, ws.dataDir),
        dClaim,
        async () => {},
      ),
    ).toBe('succeeded');
    const [dWorktree] = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE operation_id = ?',
      [d.operationId],
    );
    // E: preparing, a step claimed by a live worker (in flight).
    const e = await begin(t.db, ws, { title: 'e', workspace_policy: { mode: 'shared_group', group_id: ws.groupId } });
    const eClaim = await claimOnly(e, 'workspace_attachment');

    const { deletion, created } = await requestWorkspaceDeletion(t.db, ws.workspaceId, 'root');
    expect(created).toBe(true);
    const again = await requestWorkspaceDeletion(t.db, ws.workspaceId, 'root');
    expect(again).toMatchObject({ created: false, deletion: { id: deletion.id } });
    // From here on nothing new starts in the workspace.
    await expectTyped(begin(t.db, ws, { title: 'late' }), 'not_authorized');

    announced.length = 0;
    const first = await runWorkspaceDeletion(runner(ws), deletion.id, ws.workspaceId);
    expect(first).toMatchObject({
      handled: { deleted: 3, completed_and_deleted: 1, aborted: 1, waiting: 1 },
      finished: false,
      pending: 1,
    });
    // The two creations this pass ended are announced to their waiting requests; the deleted ones had ended.
    expect([...announced].sort()).toEqual([c.operationId, d.operationId].sort());
    expect(await events(a.r.task.id)).toEqual(['task.created@1', 'task.deleted@2']);
    expect(await events(c.task.id)).toEqual(['task.created@1', 'task.deleted@2']);
    expect(await events(d.task.id)).toEqual([]);
    expect(
      await count(
        t.db,
        'task_creation_steps',
        "operation_id = ? AND state = 'cancelled' AND disposition = 'workspace_deleted'",
        [b.r.operationId],
      ),
    ).toBe(1);
    expect(
      await count(t.db, 'task_launch_dispatch_claims', "task_id = ? AND state = 'transferred'", [f.r.task.id]),
    ).toBe(1);
    expect(
      await count(
        t.db,
        'task_creation_operations',
        "id = ? AND state = 'aborted' AND abort_cause = 'workspace_deleted'",
        [d.operationId],
      ),
    ).toBe(1);
    expect(
      await count(t.db, 'task_creation_steps', "operation_id = ? AND compensation_state = 'transferred'", [
        d.operationId,
      ]),
    ).toBe(1);
    expect(await count(t.db, 'tasks', 'external_id IS NOT NULL AND workspace_id = ?', [ws.workspaceId])).toBe(0);

    // E's worker finishes its step; the next pass aborts it.
    expect(
      await (defaultStepHandlers.workspace_attachment as StepHandler).perform(
        realDeps(t.db, ws.dataDir),
        eClaim,
        async () => {},
      ),
    ).toBe('succeeded');
    const second = await runWorkspaceDeletion(runner(ws), deletion.id, ws.workspaceId);
    expect(second).toMatchObject({ handled: { aborted: 1, waiting: 0 }, finished: true });
    expect(announced.at(-1)).toBe(e.operationId);
    const view = await readWorkspaceDeletion(t.db, deletion.id);
    expect(view).toMatchObject({
      state: 'completed',
      waiting_operations: 0,
      counts: { completed: 1, aborted: 2, deleted_tasks: 4, cancelled_launches: 1, transferred_launches: 1 },
    });
    expect(await count(t.db, 'workspaces', "id = ? AND state = 'deleted'", [ws.workspaceId])).toBe(1);
    expect(await count(t.db, 'tasks', "workspace_id = ? AND lifecycle_state <> 'deleted'", [ws.workspaceId])).toBe(0);

    await cleanAll(ws);
    const left = await sql<{ kind: string; state: string; error_code: string | null }>(
      t.db,
      "SELECT kind, state, error_code FROM task_resource_cleanup_jobs WHERE workspace_id = ? AND state <> 'done'",
      [ws.workspaceId],
    );
    expect(left).toEqual([]);
    expect(view!.counts.cleanup_jobs).toBe(
      await count(t.db, 'task_resource_cleanup_jobs', 'workspace_id = ?', [ws.workspaceId]),
    );
    const keys = await sql<{ idempotency_key: string }>(
      t.db,
      'SELECT idempotency_key FROM task_launch_dispatch_claims WHERE workspace_id = ?',
      [ws.workspaceId],
    );
    for (const k of keys) expect(findDispatchProcesses(k.idempotency_key)).toEqual([]);
    expect(existsSync(dWorktree!.worktree_path)).toBe(false);
    for (const table of ['task_sessions', 'executors_running', 'task_environment_repos', 'workspace_group_members']) {
      expect(
        await count(
          t.db,
          table,
          `workspace_id = ? AND ${table === 'task_environment_repos' ? 'operation_id IS NOT NULL' : '1 = 1'}`,
          [ws.workspaceId],
        ),
        table,
      ).toBe(0);
    }
    const report = await verifyLedger(
      { db: t.db, effects: realDeps(t.db, ws.dataDir), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
    );
    expect(report.drift).toEqual([]);
  });

  it('a crash between two creations replays the rest once', async () => {
    const ws = await world();
    const tasks = [];
    for (let i = 0; i < 3; i++) {
      const r = await begin(t.db, ws, { title: `t${i}` });
      await driveAllSteps(t.db, auth(r), r.operationId, ws.dataDir);
      await completeTaskCreation(t.db, auth(r));
      tasks.push(r.task.id);
    }
    const { deletion } = await requestWorkspaceDeletion(t.db, ws.workspaceId, 'root');
    armFailpoint('workspace_deletion_between_creations', { kind: 'throw' }, { times: 1 });
    try {
      await expect(runWorkspaceDeletion(runner(ws), deletion.id, ws.workspaceId)).rejects.toThrow();
    } finally {
      disarmFailpoint('workspace_deletion_between_creations');
    }
    expect((await readWorkspaceDeletion(t.db, deletion.id))!.counts.deleted_tasks).toBe(1);
    armFailpoint('workspace_deletion_before_finish', { kind: 'throw' }, { times: 1 });
    try {
      await expect(runWorkspaceDeletion(runner(ws), deletion.id, ws.workspaceId)).rejects.toThrow();
    } finally {
      disarmFailpoint('workspace_deletion_before_finish');
    }
    expect((await readWorkspaceDeletion(t.db, deletion.id))!.state).toBe('running');
    expect(await runWorkspaceDeletion(runner(ws), deletion.id, ws.workspaceId)).toMatchObject({ finished: true });
    for (const id of tasks) expect(await events(id)).toEqual(['task.created@1', 'task.deleted@2']);
    expect((await readWorkspaceDeletion(t.db, deletion.id))!.counts).toMatchObject({ deleted_tasks: 3 });
  });
});
