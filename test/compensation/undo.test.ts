/**
 * Compensation of each kind with an effect: the step succeeded with its real
 * effect, another step then failed permanently, `runPendingCompensations`
 * undoes the effect and records `compensated`, Abort succeeds, and the real
 * world matches the ledger (rows, files, Git worktree and branch, provider
 * comment). Runs on PostgreSQL and MySQL/MariaDB.
 */
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../src/storage/paths';
import { abortTaskCreation } from '../../src/store/abort';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped, settledTask } from '../support/ledger';
import { git, sha256 } from '../steps/support';
import { compensation, failedCreation, recovery, seeded, useFakeProvider } from './support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 100;

async function compensateAndAbort(c: Awaited<ReturnType<typeof failedCreation>>, kind: Parameters<typeof c.step>[0]) {
  expect((await compensation(t.db, c.step(kind).id)).state).toBe('required');
  await expectTyped(abortTaskCreation(t.db, recovery(c.operationId), 'step_failed'), 'creation_state_conflict');
  const report = await runPendingCompensations(c.deps, c.operationId, 'compensator-1');
  expect(report).toEqual({ compensated: 1, transferred: 0, retry: 0, unknown: 0 });
  const comp = await compensation(t.db, c.step(kind).id);
  expect(comp.state).toBe('compensated');
  expect(comp.jobId).toBeNull();
  expect(comp.proof).toMatchObject({ kind, outcome: 'compensated', cleanup_job_id: null });
  expect(comp.proof!.observation.rows.every((r: { row_sha256: string | null }) => r.row_sha256 === null)).toBe(
    kind !== 'attachment_claim',
  );
  const aborted = await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed');
  expect(aborted).toMatchObject({ replayed: false, cleanupJobIds: [] });
  expect(await count(t.db, 'tasks', 'id = ?', [c.taskId])).toBe(0);
  // Nothing left to do: a second run claims nothing.
  expect(await runPendingCompensations(c.deps, c.operationId, 'compensator-2')).toEqual({
    compensated: 0,
    transferred: 0,
    retry: 0,
    unknown: 0,
  });
}

describe('compensation undoes each kind, then Abort succeeds', () => {
  it('workspace_attachment: the member, blocker and binding rows are deleted', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const blocker = await settledTask(t.db, ws, { title: 'blocker' });
    const c = await failedCreation(t.db, ws, ['workspace_attachment'], 'attachment_claim', pr, {
      blocked_by: [blocker.task.id],
    });
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(1);
    expect(await count(t.db, 'task_blockers', 'task_id = ?', [c.taskId])).toBe(1);
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [c.taskId])).toBe(1);
    await compensateAndAbort(c, 'workspace_attachment');
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_blockers', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_environment_bindings', 'task_id = ?', [c.taskId])).toBe(0);
    // The shared group and environment themselves are untouched.
    expect(await count(t.db, 'workspace_groups', 'id = ?', [ws.groupId])).toBe(1);
    expect(await count(t.db, 'task_environments', 'id = ?', [ws.sharedEnvironmentId])).toBe(1);
  });

  it('attachment_claim: rows back to their exact staged owner, staged files intact, task copies gone', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const before = await sql(t.db, 'SELECT * FROM task_message_attachments WHERE workspace_id = ? ORDER BY id', [
      ws.workspaceId,
    ]);
    const c = await failedCreation(t.db, ws, ['attachment_claim'], 'fresh_branch_prepare', pr);
    for (const id of ws.attachmentIds) expect(existsSync(claimedAttachmentPath(ws.dataDir, c.taskId, id))).toBe(true);
    expect(await count(t.db, 'task_message_attachments', 'task_id = ?', [c.taskId])).toBe(2);
    await compensateAndAbort(c, 'attachment_claim');
    const after = await sql(t.db, 'SELECT * FROM task_message_attachments WHERE workspace_id = ? ORDER BY id', [
      ws.workspaceId,
    ]);
    const stable = (rows: Record<string, unknown>[]) => rows.map(({ updated_at: _u, ...r }) => r);
    expect(stable(after)).toEqual(stable(before));
    for (const row of after) {
      expect(row).toMatchObject({ owner_kind: 'staging', task_id: null, claimed_by_operation_id: null });
      const id = String(row.id);
      expect(sha256(readFileSync(stagedAttachmentPath(ws.dataDir, ws.workspaceId, id)))).toBe(row.content_sha256);
      expect(existsSync(claimedAttachmentPath(ws.dataDir, c.taskId, id))).toBe(false);
    }
  });

  it('attachment_claim: a staged file lost meanwhile is restored from the verified task copy', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['attachment_claim'], 'fresh_branch_prepare', pr);
    const id = ws.attachmentIds[0]!;
    const staged = stagedAttachmentPath(ws.dataDir, ws.workspaceId, id);
    const original = readFileSync(staged);
    const { unlinkSync } = await import('node:fs');
    unlinkSync(staged);
    await compensateAndAbort(c, 'attachment_claim');
    expect(readFileSync(staged).equals(original)).toBe(true);
  });

  it('fresh_branch_prepare: the untouched worktree, its branch and rows are removed', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['fresh_branch_prepare'], 'attachment_claim', pr);
    const [row] = await sql<{ worktree_path: string; branch: string }>(
      t.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
      [c.operationId],
    );
    expect(existsSync(row!.worktree_path)).toBe(true);
    await compensateAndAbort(c, 'fresh_branch_prepare');
    expect(existsSync(row!.worktree_path)).toBe(false);
    expect(git(ws.repoPath, 'worktree', 'list', '--porcelain')).not.toContain(row!.worktree_path);
    expect(git(ws.repoPath, 'branch', '--list', row!.branch).trim()).toBe('');
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(await count(t.db, 'task_environments', 'task_id = ?', [c.taskId])).toBe(0);
  });

  it('fresh_branch_prepare: an earlier undo that removed the worktree and died leaves the branch; it is deleted', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['fresh_branch_prepare'], 'attachment_claim', pr);
    const [row] = await sql<{ worktree_path: string; branch: string }>(
      t.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
      [c.operationId],
    );
    // The first half of the undo (`worktree remove`) happened; the branch deletion did not.
    git(ws.repoPath, 'worktree', 'remove', row!.worktree_path);
    expect(git(ws.repoPath, 'branch', '--list', row!.branch).trim()).not.toBe('');
    await compensateAndAbort(c, 'fresh_branch_prepare');
    expect(git(ws.repoPath, 'branch', '--list', row!.branch).trim()).toBe('');
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(0);
  });

  it('remote_contribution_associate: the marker comment and the association row are deleted', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const other = fake.server.addComment('acme/app', pr, 'a human comment');
    const c = await failedCreation(t.db, ws, ['remote_contribution_associate'], 'attachment_claim', pr);
    expect(fake.server.comments('acme/app', pr)).toHaveLength(2);
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [c.taskId])).toBe(1);
    await compensateAndAbort(c, 'remote_contribution_associate');
    expect(fake.server.comments('acme/app', pr).map((x) => x.id)).toEqual([other]);
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [c.taskId])).toBe(0);
  });

  it('session_prepare: the prepared session row and its markers are deleted', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(1);
    await compensateAndAbort(c, 'session_prepare');
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [c.taskId])).toBe(0);
  });

  it('every kind at once: five compensations, one run, Abort', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(
      t.db,
      ws,
      ['workspace_attachment', 'attachment_claim', 'fresh_branch_prepare', 'session_prepare'],
      'remote_contribution_associate',
      pr,
    );
    const report = await runPendingCompensations(c.deps, c.operationId, 'compensator-1');
    expect(report).toEqual({ compensated: 4, transferred: 0, retry: 0, unknown: 0 });
    // The launch intent was never run and is never compensated.
    expect((await compensation(t.db, c.step('launch_intent').id)).state).toBe('none');
    expect((await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed')).replayed).toBe(false);
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'task_message_attachments', 'task_id = ?', [c.taskId])).toBe(0);
  });
});
