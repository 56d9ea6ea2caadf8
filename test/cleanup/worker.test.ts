/**
 * Transfers and the cleanup worker: an effect compensation must not undo in
 * place (a modified worktree, a row someone changed, a provider that refuses,
 * a session with a runtime) transfers its complete proof to a cleanup job in
 * the same transaction, Abort accepts the transfer, and `runDueCleanupJobs`
 * then performs the job from its proof — quarantining or removing the
 * worktree whose marker still matches, deleting the marker comment and rows —
 * or leaves it `unknown` with a reason, touching nothing, when the proof no
 * longer matches. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { runPendingCompensations } from '../../src/compensation/run';
import { abortTaskCreation } from '../../src/store/abort';
import { claimCleanupJob, finishCleanupJob } from '../../src/store/cleanup-jobs';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import { executorsRunningInsert, git } from '../steps/support';
import { cleanupJob, compensation, failedCreation, recovery, seeded, useFakeProvider } from '../compensation/support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 500;

const EMPTY = { compensated: 0, transferred: 0, retry: 0, unknown: 0 };

async function worktreeRow(operationId: string) {
  const [row] = await sql<{ worktree_path: string; branch: string }>(
    t.db,
    'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
    [operationId],
  );
  return row!;
}

async function transferredCreation(kind: 'fresh_branch_prepare' | 'workspace_attachment' | 'session_prepare') {
  const ws = await seeded(t.db, fake.server, ++pr);
  return failedCreation(t.db, ws, [kind], 'attachment_claim', pr);
}

describe('a modified worktree', () => {
  it('transfers to a cleanup job, Abort succeeds, and the worker quarantines it keeping the change', async () => {
    const c = await transferredCreation('fresh_branch_prepare');
    const step = c.step('fresh_branch_prepare');
    const row = await worktreeRow(c.operationId);
    writeFileSync(join(row.worktree_path, 'README.md'), '# edited by an agent\n');

    expect(await runPendingCompensations(c.deps, c.operationId, 'comp-1')).toEqual({ ...EMPTY, transferred: 1 });
    const comp = await compensation(t.db, step.id);
    expect(comp.state).toBe('transferred');
    expect(comp.proof).toMatchObject({ outcome: 'transferred', cleanup_job_id: comp.jobId });
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({
      state: 'pending',
      kind: 'fresh_branch_prepare',
      reason: 'worktree_touched',
      step_id: step.id,
    });
    // Nothing was removed by compensation.
    expect(existsSync(row.worktree_path)).toBe(true);
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(1);

    const aborted = await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    expect(aborted.cleanupJobIds).toEqual([comp.jobId]);

    expect(await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).toEqual({
      done: 1,
      retry: 0,
      unknown: 0,
      errors: 0,
    });
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ state: 'done', error_code: null });
    const quarantined = join(c.ws.dataDir, 'quarantine', c.ws.workspaceId, comp.jobId!, basename(row.worktree_path));
    expect(existsSync(row.worktree_path)).toBe(false);
    expect(readFileSync(join(quarantined, 'README.md'), 'utf8')).toBe('# edited by an agent\n');
    expect(git(c.ws.repoPath, 'branch', '--list', row.branch).trim()).toBe('');
    expect(git(c.ws.repoPath, 'worktree', 'list', '--porcelain')).toContain(
      `branch refs/heads/taskledger-quarantine/${comp.jobId}`,
    );
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'operation_id = ?', [c.operationId])).toBe(0);
    // Done jobs are not due again.
    expect(await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).toEqual({
      done: 0,
      retry: 0,
      unknown: 0,
      errors: 0,
    });
  });

  it('a worktree cleaned again before the job runs is removed outright; a foreign marker is never touched', async () => {
    const c = await transferredCreation('fresh_branch_prepare');
    const row = await worktreeRow(c.operationId);
    writeFileSync(join(row.worktree_path, 'scratch.txt'), 'temporary\n');
    await runPendingCompensations(c.deps, c.operationId, 'comp-1');
    const comp = await compensation(t.db, c.step('fresh_branch_prepare').id);
    await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    const gitDir = git(row.worktree_path, 'rev-parse', '--absolute-git-dir').trim();
    const markerPath = join(gitDir, 'taskledger-owner.json');
    const marker = readFileSync(markerPath, 'utf8');

    // Someone else's marker: the worker refuses and records why.
    writeFileSync(markerPath, marker.replace(c.operationId, '00000000-0000-4000-8000-000000000000'));
    expect(await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).toEqual({
      done: 0,
      retry: 0,
      unknown: 1,
      errors: 0,
    });
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ state: 'unknown', error_code: 'marker_mismatch' });
    expect(existsSync(join(row.worktree_path, 'scratch.txt'))).toBe(true);
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(1);

    // An operator restores the marker, removes the scratch file and re-queues the job: now it is untouched.
    writeFileSync(markerPath, marker);
    git(row.worktree_path, 'clean', '-fdxq');
    await sql(t.db, "UPDATE task_resource_cleanup_jobs SET state = 'pending' WHERE id = ?", [comp.jobId!]);
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).done).toBe(1);
    expect(existsSync(row.worktree_path)).toBe(false);
    expect(git(c.ws.repoPath, 'branch', '--list', row.branch).trim()).toBe('');
    expect(git(c.ws.repoPath, 'worktree', 'list', '--porcelain')).not.toContain('taskledger-quarantine');
  });
});

describe('cleanup job claims', () => {
  it('a worker that died mid-job is taken over after its lease; its stale claim cannot finish', async () => {
    const c = await transferredCreation('fresh_branch_prepare');
    writeFileSync(join((await worktreeRow(c.operationId)).worktree_path, 'x.txt'), 'x\n');
    await runPendingCompensations(c.deps, c.operationId, 'comp-1');
    const jobId = (await compensation(t.db, c.step('fresh_branch_prepare').id)).jobId!;
    const dead = await claimCleanupJob(t.db, jobId, 'dead-worker');
    expect(dead).not.toBeNull();
    expect(await claimCleanupJob(t.db, jobId, 'other')).toBeNull();
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).done).toBe(0);
    const past = t.db.dialect === 'postgres' ? "now() - interval '1 hour'" : 'NOW(3) - INTERVAL 1 HOUR';
    await sql(t.db, `UPDATE task_resource_cleanup_jobs SET lease_expires_at = ${past} WHERE id = ?`, [jobId]);
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).done).toBe(1);
    await expectTyped(finishCleanupJob(t.db, dead!, { state: 'done' }), 'stale_claim');
    const [job] = await sql<{ generation: number; attempt: number }>(
      t.db,
      'SELECT generation, attempt FROM task_resource_cleanup_jobs WHERE id = ?',
      [jobId],
    );
    expect(Number(job!.generation)).toBe(2);
  });
});

describe('rows that changed since the step', () => {
  it('workspace_attachment: a member row someone changed transfers; the worker touches nothing and says why', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['workspace_attachment'], 'attachment_claim', pr);
    await sql(t.db, "UPDATE workspace_group_members SET role = 'lead' WHERE task_id = ?", [c.taskId]);
    expect(await runPendingCompensations(c.deps, c.operationId, 'comp-1')).toEqual({ ...EMPTY, transferred: 1 });
    const comp = await compensation(t.db, c.step('workspace_attachment').id);
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ reason: 'effect_changed', state: 'pending' });
    // All or nothing: the untouched binding row is still there too.
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [c.taskId])).toBe(1);
    await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    expect(await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: ws.workspaceId })).toEqual({
      done: 0,
      retry: 0,
      unknown: 1,
      errors: 0,
    });
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ state: 'unknown', error_code: 'proof_mismatch' });
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(1);
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [c.taskId])).toBe(1);
    // Put back exactly as the step left it, the job can finish.
    await sql(t.db, "UPDATE workspace_group_members SET role = 'member' WHERE task_id = ?", [c.taskId]);
    await sql(t.db, "UPDATE task_resource_cleanup_jobs SET state = 'pending' WHERE id = ?", [comp.jobId!]);
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: ws.workspaceId })).done).toBe(1);
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [c.taskId])).toBe(0);
  });

  it('session_prepare: a runtime for the session transfers; the worker waits for it to be gone', async () => {
    const c = await transferredCreation('session_prepare');
    const [session] = await sql<{ id: string }>(t.db, 'SELECT id FROM task_sessions WHERE task_id = ?', [c.taskId]);
    const { randomUUID } = await import('node:crypto');
    const runtimeId = randomUUID();
    await sql(t.db, executorsRunningInsert(t.db), [runtimeId, session!.id, c.taskId, c.ws.workspaceId, randomUUID()]);
    expect(await runPendingCompensations(c.deps, c.operationId, 'comp-1')).toEqual({ ...EMPTY, transferred: 1 });
    const comp = await compensation(t.db, c.step('session_prepare').id);
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ reason: 'effect_beyond_rows' });
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(1);
    await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).unknown).toBe(1);
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ error_code: 'effect_beyond_rows' });
    await sql(t.db, 'DELETE FROM executors_running WHERE id = ?', [runtimeId]);
    await sql(t.db, "UPDATE task_resource_cleanup_jobs SET state = 'pending' WHERE id = ?", [comp.jobId!]);
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: c.ws.workspaceId })).done).toBe(1);
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [c.taskId])).toBe(0);
  });
});

describe('a provider that refuses', () => {
  it('transfers the marker comment; the worker deletes it once the credentials work again', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['remote_contribution_associate'], 'attachment_claim', pr);
    expect(fake.server.comments('acme/app', pr)).toHaveLength(1);
    await sql(t.db, "UPDATE provider_connections SET token = 'revoked' WHERE id = ?", [ws.connectionId]);
    expect(await runPendingCompensations(c.deps, c.operationId, 'comp-1')).toEqual({ ...EMPTY, transferred: 1 });
    const comp = await compensation(t.db, c.step('remote_contribution_associate').id);
    expect(await cleanupJob(t.db, comp.jobId!)).toMatchObject({ reason: 'provider_refused' });
    await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: ws.workspaceId })).unknown).toBe(1);
    expect(fake.server.comments('acme/app', pr)).toHaveLength(1);
    await sql(t.db, "UPDATE provider_connections SET token = 'ghp_test' WHERE id = ?", [ws.connectionId]);
    await sql(t.db, "UPDATE task_resource_cleanup_jobs SET state = 'pending' WHERE id = ?", [comp.jobId!]);
    expect((await runDueCleanupJobs(c.deps, 'cleaner-1', { workspaceId: ws.workspaceId })).done).toBe(1);
    expect(fake.server.comments('acme/app', pr)).toHaveLength(0);
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [c.taskId])).toBe(0);
  });
});
