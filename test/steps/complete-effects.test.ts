/**
 * A whole creation driven by the real handlers of the five local step kinds
 * (workspace attachment, attachment claim, fresh branch, session, launch
 * intent) reaches Complete; any effect row changed after its step succeeded
 * makes Complete refuse with evidence_mismatch and zero writes. Runs on
 * PostgreSQL and MySQL/MariaDB.
 */
import { describe, expect, it } from 'vitest';
import { completeTaskCreation } from '../../src/store/complete';
import { count, sql, useTestDb } from '../support/db';
import { snapshot, stepRows } from '../support/ledger';
import { createTask, driveWithHandlers, git, seedWithFiles } from './support';

const t = useTestDb();

async function created() {
  const { ws, deps } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    repositories: [{ repository_id: ws.repositoryId }],
    attachments: ws.attachmentIds,
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId, environment_id: ws.sharedEnvironmentId },
  });
  const states = await driveWithHandlers(t.db, c.auth, c.operationId, deps);
  return { ws, deps, c, states, snap: () => snapshot(t.db, c.operationId, c.taskId) };
}

describe('Complete over real effects', () => {
  it('all five kinds performed by their handlers: Complete commits one task.created', async () => {
    const s = await created();
    expect(s.states).toEqual({
      workspace_attachment: 'succeeded',
      attachment_claim: 'succeeded',
      fresh_branch_prepare: 'succeeded',
      session_prepare: 'succeeded',
      launch_intent: 'armed',
    });
    expect((await stepRows(t.db, s.c.operationId)).map((r) => r.kind).sort()).toEqual([
      'attachment_claim',
      'fresh_branch_prepare',
      'launch_intent',
      'session_prepare',
      'workspace_attachment',
    ]);
    const result = await completeTaskCreation(t.db, s.c.auth);
    expect(result).toMatchObject({ outcome: 'Created', revision: 1, replayed: false });
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [s.c.taskId])).toBe(1);
    expect(git(s.ws.repoPath, 'worktree', 'list', '--porcelain')).toContain(
      `branch refs/heads/taskledger/${s.c.taskId}\n`,
    );
  });

  type Created = Awaited<ReturnType<typeof created>>;
  const mutations: [string, string, string, (s: Created) => unknown[]][] = [
    [
      'a group member role',
      'workspace_attachment',
      "UPDATE workspace_group_members SET role = 'lead' WHERE task_id = ?",
      (s) => [s.c.taskId],
    ],
    [
      'the bound environment',
      'workspace_attachment',
      'UPDATE task_environment_bindings SET environment_id = ? WHERE task_id = ?',
      (s) => [s.ws.groupId, s.c.taskId],
    ],
    [
      'a deleted group-member row',
      'workspace_attachment',
      'DELETE FROM workspace_group_members WHERE task_id = ?',
      (s) => [s.c.taskId],
    ],
    [
      "a shared environment's repositories",
      'workspace_attachment',
      'DELETE FROM task_environment_repos WHERE environment_id = ?',
      (s) => [s.ws.sharedEnvironmentId],
    ],
    [
      'a claimed attachment storage path',
      'attachment_claim',
      "UPDATE task_message_attachments SET storage_path = 'elsewhere' WHERE task_id = ?",
      (s) => [s.c.taskId],
    ],
    [
      'the worktree branch column',
      'fresh_branch_prepare',
      "UPDATE task_environment_repos SET branch = 'other' WHERE operation_id = ?",
      (s) => [s.c.operationId],
    ],
    [
      'a session executor profile',
      'session_prepare',
      "UPDATE task_sessions SET executor_profile_id = 'local:other' WHERE task_id = ?",
      (s) => [s.c.taskId],
    ],
    [
      'a resource marker hash',
      'session_prepare',
      "UPDATE task_resource_markers SET marker_sha256 = ? WHERE resource_key LIKE 'session:%' AND task_id = ?",
      (s) => ['e'.repeat(64), s.c.taskId],
    ],
  ];

  it.each(mutations)(
    '%s changed after success: Complete refuses with evidence_mismatch naming %s, zero writes',
    async (_n, kind, stmt, params) => {
      const s = await created();
      await sql(t.db, stmt, params(s) as never);
      const before = await s.snap();
      const err = await completeTaskCreation(t.db, s.c.auth).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'evidence_mismatch', message: expect.stringContaining(kind) });
      expect(await s.snap()).toBe(before);
      expect(await count(t.db, 'event_outbox', 'task_id = ?', [s.c.taskId])).toBe(0);
    },
  );
});
