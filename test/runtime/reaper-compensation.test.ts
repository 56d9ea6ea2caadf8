/**
 * The reaper settles a compensation that a crashed runner left behind, with
 * no other help: the runner died during the undo (`during_compensation`), the
 * compensation's lease expires, and one `sweepOnce` turns it `unknown`,
 * re-runs the kind's undo under a new compensation claim (the effect is
 * already gone: only its rows are settled), and then aborts the creation —
 * with no task.created and no worktree left. Both dialects.
 */
import { existsSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { sweepOnce } from '../../src/runtime/reaper';
import { defaultStepHandlers } from '../../src/steps/index';
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
});
