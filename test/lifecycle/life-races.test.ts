/**
 * Races of a task's life after creation, found in review (both dialects,
 * real databases, real agent processes):
 * - MoveTask decides a limited target's free slot before the moving task
 *   counts there: a task holding a slot keeps one in an empty step, a limit-1
 *   step never runs two agents, and a promoted task moved into an empty step
 *   is not stranded in its queue.
 * - A `launch_dispatch` stop job whose proof names no host (a claim recorded
 *   before runtime handles named one) is never "proved" by a host without the
 *   dispatch's start marker; a job naming another host is not counted as an
 *   attempt there (no back-off builds up before its host's worker runs it).
 * - The workspace cascade over a creation in `preparing-release` aborts it and
 *   completes its release, whichever UUID order the two rows have.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { canonicalJson, parseCanonical } from '../../src/canonical/canonical-json';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { deletionJobBuilder } from '../../src/lifecycle/deletion-jobs';
import { sweepWakeups } from '../../src/runtime/sweep';
import { completeTaskCreation } from '../../src/store/complete';
import { deleteTask } from '../../src/store/task-delete';
import { moveTask } from '../../src/store/task-move';
import type { OperationAuthority } from '../../src/store/types';
import { realDeps } from '../compensation/support';
import { count, sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';

const t = useTestDb(8);
const { queues } = useTestQueues('review');

async function world(command: string[], limits: [number, number]): Promise<SeededWorkspace> {
  const ws = await seedWorkspace(t.db);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command }),
    ws.agentProfileId,
  ]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = ? WHERE id = ?', [limits[0], ws.stepIds[0]!]);
  await sql(t.db, 'UPDATE workflow_steps SET wip_limit = ? WHERE id = ?', [limits[1], ws.stepIds[1]!]);
  return ws;
}

async function created(ws: SeededWorkspace, title: string, step: string) {
  const r = await begin(t.db, ws, {
    title,
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workflow_step_id: step,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: r.handle! };
  await driveAllSteps(t.db, auth, r.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  await sql(t.db, 'UPDATE event_outbox SET delivered_at = created_at WHERE operation_id = ?', [r.operationId]);
  const sessionId = (await stepRows(t.db, r.operationId)).find((x) => x.kind === 'launch_intent')!.step_key;
  return { r, sessionId, job: { operationId: r.operationId, taskId: r.task.id, sessionId } };
}

async function placement(taskId: string) {
  const [row] = await sql<{ workflow_step_id: string; wip_admitted: unknown; queued_for_step_id: string | null }>(
    t.db,
    'SELECT workflow_step_id, wip_admitted, queued_for_step_id FROM tasks WHERE id = ?',
    [taskId],
  );
  return {
    step: row!.workflow_step_id,
    admitted: row!.wip_admitted === true || Number(row!.wip_admitted) === 1,
    queued: row!.queued_for_step_id,
  };
}

describe('MoveTask into a limited step with room', () => {
  it('keeps the slot of a task that holds one (the target is empty, limit 1)', async () => {
    const ws = await world(['true'], [1, 1]);
    const a = await created(ws, 'a', ws.stepIds[0]!);
    expect(await launchNow(t.db, ws.dataDir, a.job)).toBe('launched');
    expect(await placement(a.r.task.id)).toEqual({ step: ws.stepIds[0], admitted: true, queued: null });

    const moved = await moveTask(t.db, a.r.task.id, ws.stepIds[1]!);
    // The target step is empty and has one slot: the task must keep holding a slot there.
    expect({ wip_admitted: moved.wip_admitted, queued_for_step_id: moved.queued_for_step_id }).toEqual({
      wip_admitted: true,
      queued_for_step_id: null,
    });
  });

  it('never lets a limit-1 step run two agents', async () => {
    const ws = await world(['true'], [1, 1]);
    const a = await created(ws, 'a', ws.stepIds[0]!);
    expect(await launchNow(t.db, ws.dataDir, a.job)).toBe('launched');
    await moveTask(t.db, a.r.task.id, ws.stepIds[1]!);
    // a's agent runs in step 1 (limit 1). A new task of step 1 must wait for a's slot.
    const b = await created(ws, 'b', ws.stepIds[1]!);
    const outcome = await launchNow(t.db, ws.dataDir, b.job);
    const launchedInStep = await count(
      t.db,
      'task_launch_dispatch_claims',
      "state = 'succeeded' AND task_id IN (SELECT id FROM tasks WHERE workflow_step_id = ?)",
      [ws.stepIds[1]!],
    );
    expect({ outcome, launchedInStep }).toEqual({ outcome: 'queued', launchedInStep: 1 });
  });

  it('does not strand a promoted task in an empty step (no promotion will ever come, the sweep skips queued tasks)', async () => {
    const ws = await world(['true'], [1, 1]);
    const p = await created(ws, 'p', ws.stepIds[0]!);
    const a = await created(ws, 'a', ws.stepIds[0]!);
    expect(await launchNow(t.db, ws.dataDir, p.job)).toBe('launched');
    expect(await launchNow(t.db, ws.dataDir, a.job)).toBe('queued');
    // p is deleted: a is promoted (holds step 0's slot; its launch wake-up is not sent yet).
    const del = await deleteTask(t.db, p.r.task.id, { requestedBy: 'r', jobs: deletionJobBuilder(ws.dataDir) });
    expect(del).toMatchObject({ deleted: true, admitted: [a.r.task.id] });
    // Before its launch runs, a is moved to step 1, which is empty (limit 1).
    await moveTask(t.db, a.r.task.id, ws.stepIds[1]!);
    await queues
      .get('launch')
      .obliterate({ force: true })
      .catch(() => undefined);
    const full = await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: null });
    const windowed = await sweepWakeups(t.db, queues, { workspaceId: ws.workspaceId, launchWindowMs: 60_000 });
    const admittedInStep1 = await count(t.db, 'tasks', 'workflow_step_id = ? AND wip_admitted = ?', [
      ws.stepIds[1]!,
      true,
    ]);
    // Step 1 has a free slot and a is its only task: a must hold it, or at least be woken by the sweep.
    expect({
      placement: await placement(a.r.task.id),
      admittedInStep1,
      woken: full.launches + windowed.launches > 0,
    }).toEqual({
      placement: { step: ws.stepIds[1], admitted: true, queued: null },
      admittedInStep1: 1,
      woken: true,
    });
  });
});

describe('a launch_dispatch cleanup job whose proof names no host', () => {
  it('is left waiting by a host without its start marker, and done by the host that has it', async () => {
    const ws = await world(['sleep', '120'], [0, 0]);
    const a = await created(ws, 'a', ws.stepIds[0]!);
    expect(await launchNow(t.db, ws.dataDir, a.job)).toBe('launched');
    // A dispatch recorded before the runtime handle named its host (legacy row).
    const [claim] = await sql<{ id: string; runtime_handle: string; idempotency_key: string }>(
      t.db,
      'SELECT id, runtime_handle, idempotency_key FROM task_launch_dispatch_claims WHERE task_id = ?',
      [a.r.task.id],
    );
    const { host: _host, ...legacy } = parseCanonical(claim!.runtime_handle) as Record<string, unknown>;
    await sql(t.db, 'UPDATE task_launch_dispatch_claims SET runtime_handle = ? WHERE id = ?', [
      canonicalJson(legacy),
      claim!.id,
    ]);
    expect(findDispatchProcesses(claim!.idempotency_key)).toHaveLength(1);

    await deleteTask(t.db, a.r.task.id, { requestedBy: 'r', jobs: deletionJobBuilder(ws.dataDir) });
    const stopJob = async () =>
      (
        await sql<{ state: string; error_code: string | null; attempt: number }>(
          t.db,
          "SELECT state, error_code, attempt FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch'",
          [a.r.task.id],
        )
      )[0]!;
    const [job] = await sql<{ proof_json: string }>(
      t.db,
      "SELECT proof_json FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch'",
      [a.r.task.id],
    );
    expect((parseCanonical(job!.proof_json) as { detail: { host: unknown } }).detail.host).toBeNull();

    // Another host's cleanup worker: a real executor whose runtime directory (that host's disk) has no marker of
    // this dispatch. Its process table here would show no agent on a real other host; absence proves nothing.
    const otherHost = new LocalProcessExecutor(join(ws.dataDir, 'other-host-runtime'), { host: 'some-other-host' });
    await runDueCleanupJobs({ ...realDeps(t.db, ws.dataDir), executor: otherHost }, 'cleaner-on-other-host', {
      workspaceId: ws.workspaceId,
    });
    const waiting = await stopJob();
    expect({
      state: waiting.state,
      code: waiting.error_code,
      agentAlive: findDispatchProcesses(claim!.idempotency_key)?.length ?? 0,
      runtimeRows: await count(t.db, 'executors_running', 'task_id = ?', [a.r.task.id]),
    }).toEqual({ state: 'retry_wait', code: 'host_unknown', agentAlive: 1, runtimeRows: 1 });

    // The host that ran it (its marker carries the key) stops the agent and finishes the job.
    await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE task_id = ?', [a.r.task.id]);
    const here = new LocalProcessExecutor(join(ws.dataDir, 'runtime'), { host: 'this-host' });
    await runDueCleanupJobs({ ...realDeps(t.db, ws.dataDir), executor: here }, 'cleaner-here', {
      workspaceId: ws.workspaceId,
    });
    expect({
      state: (await stopJob()).state,
      agentAlive: findDispatchProcesses(claim!.idempotency_key)?.length ?? 0,
      runtimeRows: await count(t.db, 'executors_running', 'task_id = ?', [a.r.task.id]),
    }).toEqual({ state: 'done', agentAlive: 0, runtimeRows: 0 });
  });

  it("another host's visit to a job that names its host is not counted as an attempt", async () => {
    const ws = await world(['sleep', '120'], [0, 0]);
    const a = await created(ws, 'a', ws.stepIds[0]!);
    expect(await launchNow(t.db, ws.dataDir, a.job)).toBe('launched');
    await deleteTask(t.db, a.r.task.id, { requestedBy: 'r', jobs: deletionJobBuilder(ws.dataDir) });
    const otherHost = new LocalProcessExecutor(join(ws.dataDir, 'other-host-runtime'), { host: 'some-other-host' });
    for (let i = 0; i < 3; i++) {
      await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE task_id = ?', [a.r.task.id]);
      await runDueCleanupJobs({ ...realDeps(t.db, ws.dataDir), executor: otherHost }, 'other', {
        workspaceId: ws.workspaceId,
      });
    }
    const [row] = await sql<{ state: string; error_code: string; attempt: number | string }>(
      t.db,
      "SELECT state, error_code, attempt FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch'",
      [a.r.task.id],
    );
    expect({ ...row, attempt: Number(row!.attempt) }).toEqual({
      state: 'retry_wait',
      error_code: 'other_host',
      attempt: 0,
    });
    // The agent's own host stops it.
    await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE task_id = ?', [a.r.task.id]);
    const here = new LocalProcessExecutor(join(ws.dataDir, 'runtime'));
    await runDueCleanupJobs({ ...realDeps(t.db, ws.dataDir), executor: here }, 'here', {
      workspaceId: ws.workspaceId,
    });
    expect(await count(t.db, 'executors_running', 'task_id = ?', [a.r.task.id])).toBe(0);
  });
});

describe('the workspace cascade over a creation in preparing-release', () => {
  for (const order of ['release-before-operation', 'release-after-operation'] as const) {
    it(`aborts it and completes its release (${order})`, async () => {
      const { claimExternalIdRelease } = await import('../../src/store/release-claim');
      const { requestWorkspaceDeletion, readWorkspaceDeletion } = await import('../../src/store/workspace-deletion');
      const { runWorkspaceDeletion } = await import('../../src/lifecycle/workspace-deletion-runner');
      const { silentLogger } = await import('../../src/log');
      const ws = await world(['true'], [0, 0]);
      const externalId = `rel-${order}`;
      const res = await begin(t.db, ws, {
        external_id: externalId,
        start_agent: true,
        agent_profile_id: ws.agentProfileId,
      });
      const r = await claimExternalIdRelease(t.db, ws.workspaceId, externalId, 'operator-1');
      expect(r.kind).toBe('claimed');
      const releaseId = (r as { claim: { releaseId: string } }).claim.releaseId;
      const tail = randomUUID().slice(8);
      const forced = order === 'release-before-operation' ? `00000000${tail}` : `ffffffff${tail}`;
      await sql(t.db, 'UPDATE external_id_releases SET id = ? WHERE id = ?', [forced, releaseId]);
      await sql(t.db, 'UPDATE task_creation_operations SET release_operation_id = ? WHERE id = ?', [
        forced,
        res.operationId,
      ]);
      const { deletion } = await requestWorkspaceDeletion(t.db, ws.workspaceId, 'root');
      const pass = await runWorkspaceDeletion(
        { db: t.db, dataDir: ws.dataDir, log: silentLogger() },
        deletion.id,
        ws.workspaceId,
      );
      expect(pass).toMatchObject({ handled: { aborted: 1 }, finished: true });
      const [rel] = await sql<{ state: string }>(t.db, 'SELECT state FROM external_id_releases WHERE id = ?', [forced]);
      const [op] = await sql<{ state: string; abort_cause: string }>(
        t.db,
        'SELECT state, abort_cause FROM task_creation_operations WHERE id = ?',
        [res.operationId],
      );
      expect({ release: rel!.state, op: op!.state, cause: op!.abort_cause }).toEqual({
        release: 'completed',
        op: 'aborted',
        cause: 'workspace_deleted',
      });
      expect((await readWorkspaceDeletion(t.db, deletion.id))!.state).toBe('completed');
    });
  }
});
