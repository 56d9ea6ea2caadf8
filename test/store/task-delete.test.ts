/**
 * DeleteTask and the cleanup of a deleted task: one transaction tombstones the
 * task (next revision, one task.deleted, its external ID free for a new
 * task) and hands every effect to cleanup jobs; the cleanup worker then stops
 * the running agent and removes the worktree, the branch, the provider marker
 * comment, the attachment files and every effect row. A repeat writes
 * nothing; a task still being created is refused with zero writes. Both
 * dialects, real Git, a real agent process and the fake provider.
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson, parseCanonical } from '../../src/canonical/canonical-json';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { LocalProcessExecutor, type Executor } from '../../src/launch/executor';
import { processLaunchJob } from '../../src/launch/launch-worker';
import { armFailpoint, disarmFailpoint } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { deletionJobBuilder } from '../../src/lifecycle/deletion-jobs';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { deleteTask } from '../../src/store/task-delete';
import type { OperationAuthority } from '../../src/store/types';
import { verifyLedger } from '../../src/verify/run';
import { count, sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps, expectTyped, snapshot } from '../support/ledger';
import { bodyFor, realDeps, seeded, useFakeProvider } from '../compensation/support';
import { git } from '../steps/support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 700;

const ALL_KINDS = [
  'workspace_attachment',
  'attachment_claim',
  'fresh_branch_prepare',
  'remote_contribution_associate',
  'session_prepare',
] as const;

async function fullTask(externalId: string) {
  const ws = await seeded(t.db, fake.server, ++pr);
  // A long-running agent: deleting the task must stop it.
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['sleep', '120'] }),
    ws.agentProfileId,
  ]);
  const res = await begin(t.db, ws, { ...bodyFor(ws, [...ALL_KINDS], pr), external_id: externalId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  const [intent] = await sql<{ step_key: string }>(
    t.db,
    "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
    [res.operationId],
  );
  const job = { operationId: res.operationId, taskId: res.task.id, sessionId: intent!.step_key };
  expect(await launchNow(t.db, ws.dataDir, job)).toBe('launched');
  return { ws, res, sessionId: intent!.step_key };
}

const options = (dataDir: string) => ({ requestedBy: 'tester', jobs: deletionJobBuilder(dataDir) });

describe('DeleteTask', () => {
  it('deletes a created task, frees its ID, and the cleanup worker removes every effect it had', async () => {
    const { ws, res, sessionId } = await fullTask('ticket-41');
    const taskId = res.task.id;
    const [claim] = await sql<{ idempotency_key: string }>(
      t.db,
      'SELECT idempotency_key FROM task_launch_dispatch_claims WHERE task_id = ?',
      [taskId],
    );
    expect(findDispatchProcesses(claim!.idempotency_key)).toHaveLength(1);
    const [wt] = await sql<{ worktree_path: string; branch: string }>(
      t.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
      [res.operationId],
    );
    expect(existsSync(wt!.worktree_path)).toBe(true);
    expect(fake.server.comments('acme/app', pr)).toHaveLength(1);

    const del = await deleteTask(t.db, taskId, options(ws.dataDir));
    expect(del).toMatchObject({ deleted: true, revision: 2, admitted: [] });
    if (!del.deleted) throw new Error('not deleted');
    const [task] = await sql<{ lifecycle_state: string; external_id: unknown; revision: number }>(
      t.db,
      'SELECT lifecycle_state, external_id, revision FROM tasks WHERE id = ?',
      [taskId],
    );
    expect(task).toMatchObject({ lifecycle_state: 'deleted', external_id: null });
    expect(await count(t.db, 'task_identities', "task_id = ? AND state = 'deleted'", [taskId])).toBe(1);
    const events = await sql<{ type: string; revision: number; payload_json: string }>(
      t.db,
      'SELECT type, revision, payload_json FROM event_outbox WHERE task_id = ? ORDER BY seq',
      [taskId],
    );
    expect(events.map((e) => [e.type, Number(e.revision)])).toEqual([
      ['task.created', 1],
      ['task.deleted', 2],
    ]);
    expect(parseCanonical(events[1]!.payload_json)).toMatchObject({
      operation_id: del.deletion_id,
      creation_operation_id: res.operationId,
      reason: 'task_deleted',
      external_id_released: true,
    });
    expect(await count(t.db, 'task_revisions', "task_id = ? AND revision = 2 AND kind = 'deleted'", [taskId])).toBe(1);
    // One job per effect: five steps and the agent.
    const kinds = await sql<{ kind: string; reason: string }>(
      t.db,
      'SELECT kind, reason FROM task_resource_cleanup_jobs WHERE task_id = ? ORDER BY kind',
      [taskId],
    );
    expect(kinds.map((k) => k.kind)).toEqual([...ALL_KINDS, 'launch_dispatch'].sort());
    expect(new Set(kinds.map((k) => k.reason))).toEqual(new Set(['task_deleted']));
    expect(
      await count(t.db, 'task_launch_dispatch_claims', 'task_id = ? AND deletion_operation_id = ?', [
        taskId,
        del.deletion_id,
      ]),
    ).toBe(1);

    // The external ID is free: a new create with it makes a new task.
    const again = await begin(t.db, ws, { title: 'again', external_id: 'ticket-41' });
    expect(again.outcome).toBe('Created');
    expect(again.task.id).not.toBe(taskId);

    // A repeat deletes nothing twice.
    const before = await snapshot(t.db, res.operationId, taskId);
    expect(await deleteTask(t.db, taskId, options(ws.dataDir))).toMatchObject({ deleted: false });
    expect(await snapshot(t.db, res.operationId, taskId)).toBe(before);

    // The cleanup worker: the agent first; the worktree and session wait for it within the same passes.
    const deps = { ...realDeps(t.db, ws.dataDir), executor: new LocalProcessExecutor(join(ws.dataDir, 'runtime')) };
    for (let pass = 0; pass < 4; pass++) {
      await runDueCleanupJobs(deps, 'cleaner', { workspaceId: ws.workspaceId });
      await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE task_id = ?', [taskId]);
    }
    const states = await sql<{ kind: string; state: string; error_code: string | null }>(
      t.db,
      'SELECT kind, state, error_code FROM task_resource_cleanup_jobs WHERE task_id = ? ORDER BY kind',
      [taskId],
    );
    expect(states.filter((s) => s.state !== 'done')).toEqual([]);
    expect(findDispatchProcesses(claim!.idempotency_key)).toEqual([]);
    expect(existsSync(wt!.worktree_path)).toBe(false);
    expect(git(ws.repoPath, 'branch', '--list', wt!.branch).trim()).toBe('');
    expect(fake.server.comments('acme/app', pr)).toHaveLength(0);
    for (const table of ['task_sessions', 'executors_running', 'task_resource_markers', 'workspace_group_members']) {
      expect(await count(t.db, table, 'task_id = ?', [taskId]), table).toBe(0);
    }
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [res.operationId])).toBe(0);
    expect(await count(t.db, 'task_message_attachments', 'task_id = ?', [taskId])).toBe(0);
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [taskId])).toBe(0);
    for (const id of ws.attachmentIds) {
      expect(existsSync(join(ws.dataDir, 'attachments', taskId, id))).toBe(false);
      expect(existsSync(join(ws.dataDir, 'staging', ws.workspaceId, id))).toBe(false);
    }
    expect(await count(t.db, 'task_sessions', 'id = ?', [sessionId])).toBe(0);

    const report = await verifyLedger(
      { db: t.db, effects: realDeps(t.db, ws.dataDir), handlers: defaultStepHandlers },
      { workspaceId: ws.workspaceId, observe: true, maxDrift: 100, pageSize: 50 },
    );
    expect(report.drift).toEqual([]);
  });

  it('refuses a task still being created, and an unknown one, with zero writes', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const open = await begin(t.db, ws, { title: 'open' });
    const before = await snapshot(t.db, open.operationId, open.task.id);
    await expectTyped(deleteTask(t.db, open.task.id, options(ws.dataDir)), 'creation_state_conflict');
    expect(await snapshot(t.db, open.operationId, open.task.id)).toBe(before);
    await expectTyped(deleteTask(t.db, '00000000-0000-4000-8000-000000000000', options(ws.dataDir)), 'not_found');
  });
});

describe('DeleteTask racing a launch', () => {
  async function queuedLaunch(title: string) {
    const ws = await seeded(t.db, fake.server, ++pr);
    await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
      canonicalJson({ kind: 'local', command: ['sleep', '120'] }),
      ws.agentProfileId,
    ]);
    const res = await begin(t.db, ws, { title, start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    await completeTaskCreation(t.db, auth);
    const [intent] = await sql<{ step_key: string }>(
      t.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'launch_intent'",
      [res.operationId],
    );
    return { ws, res, job: { operationId: res.operationId, taskId: res.task.id, sessionId: intent!.step_key } };
  }

  it('a deletion between the claim and the start: the start is refused, no agent ever runs', async () => {
    const { ws, res, job } = await queuedLaunch('deleted before its start');
    armFailpoint(
      'after_dispatch_claim_before_runtime_start',
      { kind: 'call', fn: async () => void (await deleteTask(t.db, res.task.id, options(ws.dataDir))) },
      { times: 1 },
    );
    try {
      expect(await launchNow(t.db, ws.dataDir, job)).toBe('skipped');
    } finally {
      disarmFailpoint('after_dispatch_claim_before_runtime_start');
    }
    const [claim] = await sql<{ state: string; idempotency_key: string }>(
      t.db,
      'SELECT state, idempotency_key FROM task_launch_dispatch_claims WHERE task_id = ?',
      [res.task.id],
    );
    expect(claim!.state).toBe('transferred');
    expect(findDispatchProcesses(claim!.idempotency_key)).toEqual([]);
    expect(await count(t.db, 'executors_running', 'task_id = ?', [res.task.id])).toBe(0);
  });

  it('a deletion after the start: the record is refused, and the cleanup job stops the agent once its lease ends', async () => {
    const { ws, res, job } = await queuedLaunch('deleted while starting');
    const local = new LocalProcessExecutor(join(ws.dataDir, 'runtime'));
    const deletingAfterStart: Executor = {
      kind: local.kind,
      host: local.host,
      observe: (ref) => local.observe(ref),
      stop: (ref) => local.stop(ref),
      start: async (req) => {
        const started = await local.start(req);
        await deleteTask(t.db, res.task.id, options(ws.dataDir));
        return started;
      },
    };
    const outcome = await processLaunchJob(
      {
        db: t.db,
        executor: deletingAfterStart,
        dataDir: ws.dataDir,
        log: silentLogger(),
        metrics: null,
        workerId: `${hostname()}:1:race`,
        leaseMs: 1500,
      },
      job,
    );
    expect(outcome).toBe('skipped');
    const [claim] = await sql<{ state: string; idempotency_key: string }>(
      t.db,
      'SELECT state, idempotency_key FROM task_launch_dispatch_claims WHERE task_id = ?',
      [res.task.id],
    );
    expect(claim!.state).toBe('transferred');
    expect(findDispatchProcesses(claim!.idempotency_key)).toHaveLength(1);
    const deps = { ...realDeps(t.db, ws.dataDir), executor: local };
    await runDueCleanupJobs(deps, 'cleaner', { workspaceId: ws.workspaceId });
    const [stop] = await sql<{ state: string; error_code: string | null }>(
      t.db,
      "SELECT state, error_code FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch'",
      [res.task.id],
    );
    // The agent is stopped at once; the job ends only once the fenced claim's lease has run out.
    expect(stop).toMatchObject({ state: 'retry_wait', error_code: 'claim_lease_live' });
    expect(findDispatchProcesses(claim!.idempotency_key)).toEqual([]);
    await new Promise((r) => setTimeout(r, 1600));
    await sql(t.db, 'UPDATE task_resource_cleanup_jobs SET next_attempt_at = NULL WHERE task_id = ?', [res.task.id]);
    await runDueCleanupJobs(deps, 'cleaner', { workspaceId: ws.workspaceId });
    expect(
      await count(t.db, 'task_resource_cleanup_jobs', "task_id = ? AND kind = 'launch_dispatch' AND state = 'done'", [
        res.task.id,
      ]),
    ).toBe(1);
  });
});
