/**
 * A crash during compensation: the claim committed and the worktree was
 * removed, but the result was never recorded (`during_compensation` armed
 * with throw). The compensation stays `running` and blocks Abort; once its
 * lease expires, ExpireTaskCreationLeases makes it `unknown`, and
 * `reconcileUnknownCompensation` runs the idempotent undo again, which finds
 * the Git effect gone, deletes the rows and records `compensated`. Runs on
 * PostgreSQL and MySQL/MariaDB.
 */
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { reconcileUnknownCompensation } from '../../src/compensation/reconcile';
import { runPendingCompensations } from '../../src/compensation/run';
import { armFailpoint, disarmAll, FailpointError, failpointHits } from '../../src/failpoints';
import { abortTaskCreation } from '../../src/store/abort';
import { expireTaskCreationLeases } from '../../src/store/lease-expiry';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import { git } from '../steps/support';
import { compensation, failedCreation, recovery, seeded, useFakeProvider } from './support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 300;
afterEach(() => disarmAll());

async function backdateCompensationLease(operationId: string): Promise<void> {
  const past = t.db.dialect === 'postgres' ? "now() - interval '1 hour'" : 'NOW(3) - INTERVAL 1 HOUR';
  await sql(
    t.db,
    `UPDATE task_creation_steps SET compensation_lease_expires_at = ${past} WHERE operation_id = ? AND compensation_state = 'running'`,
    [operationId],
  );
}

describe('a crash during compensation', () => {
  it('leaves it running, the lease expires to unknown, and reconciliation finishes it from observation', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['fresh_branch_prepare'], 'attachment_claim', pr);
    const step = c.step('fresh_branch_prepare');
    const [row] = await sql<{ worktree_path: string; branch: string }>(
      t.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE operation_id = ?',
      [c.operationId],
    );
    armFailpoint('during_compensation', { kind: 'throw' }, { match: (ctx) => ctx.stepId === step.id });
    await expect(runPendingCompensations(c.deps, c.operationId, 'doomed')).rejects.toBeInstanceOf(FailpointError);
    expect(failpointHits('during_compensation')).toBe(1);
    disarmAll();

    // The undo's Git half happened; its record did not.
    expect(existsSync(row!.worktree_path)).toBe(false);
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(1);
    expect((await compensation(t.db, step.id)).state).toBe('running');
    await expectTyped(abortTaskCreation(t.db, recovery(c.operationId), 'step_failed'), 'creation_state_conflict');
    // A live lease is not expired.
    expect(await expireTaskCreationLeases(t.db, c.operationId)).toEqual({ steps: 0, compensations: 0 });

    await backdateCompensationLease(c.operationId);
    expect(await expireTaskCreationLeases(t.db, c.operationId)).toEqual({ steps: 0, compensations: 1 });
    expect((await compensation(t.db, step.id)).state).toBe('unknown');
    // unknown is never pending work for the plain runner, and still blocks Abort.
    expect((await runPendingCompensations(c.deps, c.operationId, 'other')).compensated).toBe(0);
    await expectTyped(abortTaskCreation(t.db, recovery(c.operationId), 'step_failed'), 'creation_state_conflict');

    const report = await reconcileUnknownCompensation(c.deps, c.operationId, 'reaper-1');
    expect(report).toEqual({ compensated: 1, transferred: 0, retry: 0, unknown: 0 });
    expect((await compensation(t.db, step.id)).state).toBe('compensated');
    expect(await count(t.db, 'task_environment_repos', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(await count(t.db, 'task_resource_markers', 'operation_id = ?', [c.operationId])).toBe(0);
    expect(git(ws.repoPath, 'branch', '--list', row!.branch).trim()).toBe('');
    expect((await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed')).replayed).toBe(false);
  });

  it('a crash before a database-only undo leaves the rows; reconciliation deletes them then', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    armFailpoint('during_compensation', { kind: 'throw' });
    await expect(runPendingCompensations(c.deps, c.operationId, 'doomed')).rejects.toBeInstanceOf(FailpointError);
    disarmAll();
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(1);
    await backdateCompensationLease(c.operationId);
    await expireTaskCreationLeases(t.db, c.operationId);
    expect((await reconcileUnknownCompensation(c.deps, c.operationId, 'reaper-1')).compensated).toBe(1);
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.taskId])).toBe(0);
    expect((await abortTaskCreation(t.db, recovery(c.operationId), 'step_failed')).replayed).toBe(false);
  });

  it('the stale claim of the crashed runner can no longer record after reconciliation', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['workspace_attachment'], 'attachment_claim', pr);
    const { claimTaskCreationCompensation, completeTaskCreationCompensation, compensationProofOf } =
      await import('../../src/store/compensation');
    const step = c.step('workspace_attachment');
    const stale = await claimTaskCreationCompensation(
      t.db,
      recovery(c.operationId),
      { kind: 'workspace_attachment', stepKey: step.step_key },
      'doomed',
    );
    await backdateCompensationLease(c.operationId);
    await expireTaskCreationLeases(t.db, c.operationId);
    expect((await reconcileUnknownCompensation(c.deps, c.operationId, 'reaper-1')).compensated).toBe(1);
    await expectTyped(
      completeTaskCreationCompensation(t.db, stale, compensationProofOf(stale, 'retry_wait', null, 'late', [])),
      'stale_claim',
    );
    expect((await compensation(t.db, step.id)).state).toBe('compensated');
  });
});
