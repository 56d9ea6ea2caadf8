/**
 * The reaper settles a compensation that a crashed runner left behind, with
 * no other help: the runner died during the undo (`during_compensation`), the
 * compensation's lease expires, and one `sweepOnce` turns it `unknown`,
 * re-runs the kind's undo under a new compensation claim (the effect is
 * already gone: only its rows are settled), and then aborts the creation —
 * with no task.created and no worktree left. Then the same for each kind with
 * an effect: its runner crashes during the undo, the sweep alone ends the
 * creation aborted with the effect compensated and the world empty of it.
 * Both dialects.
 */
import { existsSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { sweepOnce } from '../../src/runtime/reaper';
import type { StepKind } from '../../src/domain/vocab';
import { claimedAttachmentPath } from '../../src/storage/paths';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { count, sql, useTestDb } from '../support/db';
import { compensation, failedCreation, seeded } from '../compensation/support';
import { git } from '../steps/support';

const t = useTestDb();
let provider: FakeProviderServer;
beforeAll(async () => {
  provider = await startFakeProviderServer();
});
afterAll(async () => {
  await provider?.close();
});
afterEach(() => disarmAll());

const sweep = (c: { deps: Parameters<typeof sweepOnce>[0]['effects'] }, workspaceId: string) =>
  sweepOnce({
    effects: c.deps,
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor: 'reaper:test',
    workspaceId,
  });

const backdateCompensation = (operationId: string) =>
  sql(
    t.db,
    `UPDATE task_creation_steps SET compensation_lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 hour'" : 'NOW(3) - INTERVAL 1 HOUR'} WHERE operation_id = ? AND compensation_state = 'running'`,
    [operationId],
  );

let pr = 910;

describe('the reaper and a crashed compensation', () => {
  it('expires the compensation lease, re-runs the undo from observation, then aborts: one sweep', async () => {
    const ws = await seeded(t.db, provider, 901);
    const c = await failedCreation(t.db, ws, ['fresh_branch_prepare', 'session_prepare'], 'attachment_claim', 901);
    const [repo] = await sql<{ worktree_path: string; branch: string }>(
      t.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
      [c.operationId],
    );
    armFailpoint('during_compensation', { kind: 'throw' }, { match: (ctx) => ctx.kind === 'fresh_branch_prepare' });
    await expect(runPendingCompensations(c.deps, c.operationId, 'doomed')).rejects.toBeInstanceOf(FailpointError);
    disarmAll();
    expect((await compensation(t.db, c.step('fresh_branch_prepare').id)).state).toBe('running');
    const past = t.db.dialect === 'postgres' ? "now() - interval '1 hour'" : 'NOW(3) - INTERVAL 1 HOUR';
    await sql(
      t.db,
      `UPDATE task_creation_steps SET compensation_lease_expires_at = ${past} WHERE operation_id = ? AND compensation_state = 'running'`,
      [c.operationId],
    );

    const report = await sweepOnce({
      effects: c.deps,
      handlers: defaultStepHandlers,
      queues: null,
      log: silentLogger(),
      actor: 'reaper:test',
      workspaceId: ws.workspaceId,
    });
    expect(report.expiredCompensations).toBe(1);
    expect(report.recovered.reconcile_unknown_step).toBe(1);
    expect(report.recovered.abort_preparing).toBe(1);
    expect(report.recoveryConflicts).toBe(0);

    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      c.operationId,
    ]);
    expect(op!.state).toBe('aborted');
    expect((await compensation(t.db, c.step('fresh_branch_prepare').id)).state).toBe('compensated');
    expect((await compensation(t.db, c.step('session_prepare').id)).state).toBe('compensated');
    expect(existsSync(repo!.worktree_path)).toBe(false);
    expect(git(ws.repoPath, 'branch', '--list', repo!.branch).trim()).toBe('');
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'tasks', 'id = ?', [c.taskId])).toBe(0);
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [c.taskId])).toBe(0);
  });

  const EFFECT_KINDS: StepKind[] = [
    'workspace_attachment',
    'attachment_claim',
    'fresh_branch_prepare',
    'remote_contribution_associate',
    'session_prepare',
  ];
  it.each(EFFECT_KINDS)(
    '%s: a runner dying during its undo is finished by the sweep, then the creation aborts',
    async (kind) => {
      const ws = await seeded(t.db, provider, ++pr);
      const fail: StepKind = kind === 'attachment_claim' ? 'fresh_branch_prepare' : 'attachment_claim';
      const c = await failedCreation(t.db, ws, [kind], fail, pr);
      const [repo] = await sql<{ worktree_path: string; branch: string }>(
        t.db,
        'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
        [c.operationId],
      );
      armFailpoint('during_compensation', { kind: 'throw' });
      await expect(runPendingCompensations(c.deps, c.operationId, 'doomed')).rejects.toBeInstanceOf(FailpointError);
      disarmAll();
      expect((await compensation(t.db, c.step(kind).id)).state).toBe('running');
      // While the dead runner's lease is live, the sweep waits for it.
      const early = await sweep(c, ws.workspaceId);
      expect(early.recovered.abort_preparing).toBe(0);
      await backdateCompensation(c.operationId);

      const report = await sweep(c, ws.workspaceId);
      expect(report.expiredCompensations).toBe(1);
      expect(report.recovered.abort_preparing).toBe(1);
      expect(report.recoveryConflicts).toBe(0);
      expect((await compensation(t.db, c.step(kind).id)).state).toBe('compensated');
      const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
        c.operationId,
      ]);
      expect(op!.state).toBe('aborted');
      expect(await count(t.db, 'tasks', 'id = ?', [c.taskId])).toBe(0);
      expect(await count(t.db, 'event_outbox', 'task_id = ?', [c.taskId])).toBe(0);
      // The real world holds nothing of the effect.
      switch (kind) {
        case 'workspace_attachment':
          expect(await count(t.db, 'workspace_group_members', 'task_id = ?', [c.taskId])).toBe(0);
          break;
        case 'attachment_claim':
          expect(await count(t.db, 'task_message_attachments', 'task_id = ?', [c.taskId])).toBe(0);
          for (const id of ws.attachmentIds)
            expect(existsSync(claimedAttachmentPath(ws.dataDir, c.taskId, id))).toBe(false);
          break;
        case 'fresh_branch_prepare':
          expect(existsSync(repo!.worktree_path)).toBe(false);
          expect(git(ws.repoPath, 'branch', '--list', repo!.branch).trim()).toBe('');
          break;
        case 'remote_contribution_associate':
          expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [c.taskId])).toBe(0);
          expect(provider.comments('acme/app', pr).filter((x) => x.body.includes(c.taskId))).toHaveLength(0);
          break;
        case 'session_prepare':
          expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
          break;
      }
    },
  );

  it('one operation whose recovery throws unexpectedly does not stop the sweep: the next one still aborts', async () => {
    const ws = await seeded(t.db, provider, ++pr);
    const broken = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    const healthy = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    armFailpoint(
      'during_compensation',
      {
        kind: 'call',
        fn: () => {
          throw new Error('an unexpected bug in one undo');
        },
      },
      { match: (ctx) => ctx.operationId === broken.operationId },
    );
    const report = await sweep(broken, ws.workspaceId);
    expect(report.recoveryErrors).toBe(1);
    expect(report.recovered.abort_preparing).toBe(1);
    const states = await sql<{ id: string; state: string }>(
      t.db,
      'SELECT id, state FROM task_creation_operations WHERE id IN (?, ?)',
      [broken.operationId, healthy.operationId],
    );
    expect(Object.fromEntries(states.map((r) => [r.id, r.state]))).toEqual({
      [broken.operationId]: 'preparing',
      [healthy.operationId]: 'aborted',
    });
  });
});
