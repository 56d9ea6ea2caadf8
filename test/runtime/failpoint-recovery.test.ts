/**
 * Crashes at named failpoints, then recovery reaches the one correct end with
 * exactly one task.created and evidence matching the real world. Both dialects.
 */
import { execFileSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { sweepOnce } from '../../src/runtime/reaper';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();
afterEach(() => disarmAll());

const deps = (dataDir: string, workspaceId: string) => ({
  effects: {
    db: t.db,
    dataDir,
    providers: createProviderRegistry({ timeoutMs: 1500 }),
    log: silentLogger(),
    timeoutMs: 5000,
  },
  handlers: defaultStepHandlers,
  queues: null,
  log: silentLogger(),
  actor: 'reaper:test',
  workspaceId,
});

const backdateAll = (operationId: string) =>
  sql(
    t.db,
    `UPDATE task_creation_steps SET lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'} WHERE operation_id = ? AND state = 'running'`,
    [operationId],
  );

describe('crash at a failpoint, then recover', () => {
  it('fresh_branch_prepare whose worker died right after its claim committed is retried from absent proof and completes', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, {
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
      repositories: [{ repository_id: ws.repositoryId }],
    });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const rows = await stepRows(t.db, res.operationId);
    const fresh = rows.find((r) => r.kind === 'fresh_branch_prepare')!;
    // The worker claims, then dies before performing anything.
    await claimTaskCreationStep(t.db, auth, { kind: 'fresh_branch_prepare', stepKey: fresh.step_key }, 'doomed');
    await backdateAll(res.operationId);
    const report = await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    expect(report.reconciled.retry).toBe(1);
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    const worktrees = execFileSync('git', ['-C', ws.repoPath, 'worktree', 'list', '--porcelain']).toString();
    const [row] = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE id = ?',
      [fresh.step_key],
    );
    expect(worktrees).toContain(row!.worktree_path);
  });

  it('a remote link whose record is lost after the comment was posted is reconciled present, never posted twice', async () => {
    const ws = await seedWorkspace(t.db);
    const { startFakeProviderServer } = await import('../../src/providers/fake-server');
    const provider = await startFakeProviderServer();
    try {
      provider.addPullRequest('acme/app', 8);
      await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', ['acme/app', ws.repositoryId]);
      await sql(t.db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [
        provider.githubBaseUrl,
        ws.connectionId,
      ]);
      const res = await begin(t.db, ws, {
        contributions: [
          {
            provider: 'github',
            connection_id: ws.connectionId,
            repository_id: ws.repositoryId,
            contribution_kind: 'pull_request',
            contribution_id: '8',
          },
        ],
      });
      const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
      const key = (await stepRows(t.db, res.operationId))[0]!.step_key;
      armFailpoint(
        'after_effect_before_record',
        { kind: 'throw' },
        { match: (c) => c.kind === 'remote_contribution_associate' },
      );
      const claim = await claimTaskCreationStep(
        t.db,
        auth,
        { kind: 'remote_contribution_associate', stepKey: key },
        'doomed',
      );
      const d = deps(ws.dataDir, ws.workspaceId);
      await expect(
        defaultStepHandlers.remote_contribution_associate.perform(d.effects, claim, async () => {}),
      ).rejects.toBeInstanceOf(FailpointError);
      disarmAll();
      await backdateAll(res.operationId);
      const report = await sweepOnce(d);
      expect(report.reconciled.succeeded).toBe(1);
      expect(provider.comments('acme/app', 8).filter((c) => c.body.includes(res.task.id))).toHaveLength(1);
      expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    } finally {
      await provider.close();
    }
  });

  it('a crash between Complete phase A and phase B is finished by the recovery actor, with one task.created', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    armFailpoint('between_complete_phase_a_and_b', { kind: 'throw' });
    await expect(completeTaskCreation(t.db, auth)).rejects.toBeInstanceOf(FailpointError);
    disarmAll();
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      res.operationId,
    ]);
    expect(op!.state).toBe('completing');
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [res.task.id])).toBe(0);
    const done = await completeTaskCreation(t.db, {
      kind: 'operation',
      operationId: res.operationId,
      actor: 'recovery',
    });
    expect(done.outcome).toBe('Created');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
  });
});
