/**
 * `retry_preparing_release`: a releaser that died between its claim and its
 * apply (failpoint `between_release_claim_and_apply`) leaves the creation
 * `preparing-release`; the reaper's next sweep picks it up at once (not
 * after the quiet period) and applies that same release, then recovery goes
 * on (a finished creation completes as CreatedIdentityLost). A reaper that
 * races a live releaser is harmless: the later apply replays. Both dialects.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { bool } from '../../src/db/tx';
import { armFailpoint, disarmAll } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { sweepOnce } from '../../src/runtime/reaper';
import { recoverOperation } from '../../src/runtime/recover';
import { findRecoveryCandidates } from '../../src/runtime/sweep';
import { releaseExternalId } from '../../src/setup/release-external-id';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, snapshot } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
afterEach(() => disarmAll());

/** Why an hour: far beyond the test, so only the "whatever its age" branch can pick the operation. */
const NEVER_QUIET_MS = 3_600_000;

const deps = (ws: SeededWorkspace) => ({
  effects: {
    db: t.db,
    dataDir: ws.dataDir,
    providers: createProviderRegistry({ timeoutMs: 1500 }),
    log: silentLogger(),
    timeoutMs: 5000,
  },
  handlers: defaultStepHandlers,
  queues: null,
  log: silentLogger(),
  actor: 'reaper:release-test',
  workspaceId: ws.workspaceId,
  quietMs: NEVER_QUIET_MS,
});

async function state(operationId: string) {
  const [op] = await sql<{ state: string; release_applied: unknown; result_outcome: string | null; task_id: string }>(
    t.db,
    'SELECT state, release_applied, result_outcome, task_id FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  const releases = await sql<{ state: string }>(
    t.db,
    'SELECT state FROM external_id_releases WHERE creation_operation_id = ?',
    [operationId],
  );
  const [task] = await sql<{ external_id: string | null }>(t.db, 'SELECT external_id FROM tasks WHERE id = ?', [
    op!.task_id,
  ]);
  return {
    op: op!.state,
    applied: bool(op!.release_applied),
    outcome: op!.result_outcome,
    releases: releases.map((r) => r.state),
    externalId: task?.external_id ?? null,
  };
}

/** Begins a creation holding `externalId`, then releases it with the releaser dying right after its claim. */
async function crashedRelease(externalId: string, driveFirst: boolean) {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, {
    external_id: externalId,
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  if (driveFirst) await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
  await expect(releaseExternalId(t.db, ws.workspaceId, externalId, 'operator-1')).rejects.toThrow(/failpoint/);
  expect(await state(res.operationId)).toMatchObject({ op: 'preparing-release', releases: ['running'] });
  return { ws, res, auth };
}

describe('retry_preparing_release', () => {
  it('the next sweep applies the crashed release at once; the creation then completes as CreatedIdentityLost', async () => {
    const { ws, res, auth } = await crashedRelease('crash-planned', false);
    const candidates = await findRecoveryCandidates(t.db, {
      limit: 10,
      quietMs: NEVER_QUIET_MS,
      workspaceId: ws.workspaceId,
    });
    expect(candidates).toEqual([res.operationId]);
    const report = await sweepOnce(deps(ws));
    expect(report.recovered.retry_preparing_release).toBe(1);
    expect(report.recoveryConflicts).toBe(0);
    expect(await state(res.operationId)).toEqual({
      op: 'preparing',
      applied: true,
      outcome: null,
      releases: ['completed'],
      externalId: null,
    });
    // Released and recovered: not a candidate any more (its steps wait for workers, not for recovery).
    expect(
      await findRecoveryCandidates(t.db, { limit: 10, quietMs: NEVER_QUIET_MS, workspaceId: ws.workspaceId }),
    ).toEqual([]);
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('CreatedIdentityLost');
  });

  it('a creation whose steps had all finished is applied and then completed by the same sweep, without its ID', async () => {
    const { ws, res } = await crashedRelease('crash-finished', true);
    const report = await sweepOnce(deps(ws));
    expect(report.recovered.retry_preparing_release).toBe(1);
    expect(report.recovered.complete_preparing).toBe(1);
    expect(await state(res.operationId)).toMatchObject({
      op: 'completed',
      outcome: 'CreatedIdentityLost',
      applied: true,
    });
    const [ev] = await sql<{ payload_json: string }>(
      t.db,
      "SELECT payload_json FROM event_outbox WHERE task_id = ? AND type = 'task.created'",
      [res.task.id],
    );
    expect(JSON.parse(ev!.payload_json).external_id).toBeNull();
    const next = await begin(t.db, ws, { external_id: 'crash-finished' });
    expect(next.outcome).toBe('Created');
    expect(next.task.id).not.toBe(res.task.id);
  });

  it('a reaper that applies while the releaser is between claim and apply is harmless: the releaser replays', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'race-1' });
    let recovered: Awaited<ReturnType<typeof recoverOperation>> | undefined;
    armFailpoint(
      'between_release_claim_and_apply',
      {
        kind: 'call',
        fn: async () => {
          recovered = await recoverOperation(deps(ws), res.operationId);
        },
      },
      { times: 1 },
    );
    const out = await releaseExternalId(t.db, ws.workspaceId, 'race-1', 'operator-1');
    expect(out).toMatchObject({ released: true, operation_id: res.operationId, release_applied: true });
    expect(recovered).toMatchObject({ action: 'retry_preparing_release', progressed: true, detail: null });
    expect(await state(res.operationId)).toMatchObject({ op: 'preparing', applied: true, releases: ['completed'] });
    expect(await count(t.db, 'external_id_releases', 'creation_operation_id = ?', [res.operationId])).toBe(1);
  });

  it('recovery of a preparing-release creation that lost its release row is refused with zero writes', async () => {
    const { ws, res } = await crashedRelease('crash-tampered', false);
    await sql(t.db, 'DELETE FROM external_id_releases WHERE creation_operation_id = ?', [res.operationId]);
    const before = await snapshot(t.db, res.operationId, res.task.id);
    const out = await recoverOperation(deps(ws), res.operationId);
    expect(out.action).toBe('retry_preparing_release');
    expect(out.detail).toMatch(/^not_found/);
    // Only the recovery claim's own bookkeeping columns moved; state, ID and release columns did not.
    const after = JSON.parse(await snapshot(t.db, res.operationId, res.task.id)) as Record<string, unknown>[][];
    const prior = JSON.parse(before) as Record<string, unknown>[][];
    expect(after.slice(1)).toEqual(prior.slice(1));
    const pick = (r: Record<string, unknown>) => [
      r.state,
      r.release_operation_id,
      r.release_generation,
      r.release_applied,
    ];
    expect(pick(after[0]![0]!)).toEqual(pick(prior[0]![0]!));
  });
});
