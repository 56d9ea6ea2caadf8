/**
 * The reaper's sweep: expired leases become `unknown` (never `failed`),
 * unknown steps are resolved only from an observation of the real effect,
 * a failed creation is aborted and a stalled one completed (never a creation
 * still being driven), and wake-ups lost from Redis are re-sent from the
 * ledger. Both dialects.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { sweepOnce } from '../../src/runtime/reaper';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { beginTaskCreation } from '../../src/store/begin';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { completeTaskCreationStep, failTaskCreationStep } from '../../src/store/step-results';
import { completeTaskCreation } from '../../src/store/complete';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { permanentFailure, presentEvidence } from '../support/evidence';
import { begin, driveAllSteps, expectTyped, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { deadlockOn } from '../support/db-faults';
import { startWorld, waitFor } from '../fleet/support';

const t = useTestDb();
let provider: FakeProviderServer;
beforeAll(async () => {
  provider = await startFakeProviderServer();
  provider.addPullRequest('acme/app', 5);
});
afterAll(async () => {
  await provider?.close();
});

function deps(dataDir: string, workspaceId: string, quietMs?: number) {
  return {
    effects: {
      db: t.db,
      dataDir,
      providers: createProviderRegistry({ timeoutMs: 1500 }),
      log: silentLogger(),
      timeoutMs: 1500,
    },
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor: 'reaper:test',
    workspaceId,
    quietMs,
  };
}

const backdate = (stepId: string) =>
  sql(
    t.db,
    `UPDATE task_creation_steps SET lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'} WHERE id = ?`,
    [stepId],
  );

/** A creation whose worker died holding its session_prepare claim, the lease already expired. */
async function diedHoldingSessionPrepare() {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const key = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!.step_key;
  const dead = await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: key }, 'killed-worker');
  await backdate(dead.stepId);
  return { ws, res, auth, dead };
}

describe('lease expiry and reconciliation', () => {
  it('an expired claim whose worker died before the effect becomes unknown, then retry_wait from absent proof', async () => {
    const { ws, res, auth, dead } = await diedHoldingSessionPrepare();
    const report = await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    expect(report.expiredSteps).toBeGreaterThanOrEqual(1);
    const [row] = await sql<{ state: string; generation: number }>(
      t.db,
      'SELECT state, generation FROM task_creation_steps WHERE id = ?',
      [dead.stepId],
    );
    expect(row!.state).toBe('retry_wait');
    expect(Number(row!.generation)).toBe(dead.generation + 1);
    // The dead worker's late result is fenced off; a new claim proceeds.
    await expectTyped(completeTaskCreationStep(t.db, dead, { evidence: presentEvidence(dead) }), 'stale_claim');
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  });

  it('a live lease is never expired', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const key = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!.step_key;
    const live = await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: key }, 'alive', 60_000);
    await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    const [row] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE id = ?', [
      live.stepId,
    ]);
    expect(row!.state).toBe('running');
  });

  it('an ambiguous provider write (timeout after the comment was posted) resolves to succeeded from observation', async () => {
    const ws = await seedWorkspace(t.db);
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
          contribution_id: '5',
        },
      ],
    });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const key = (await stepRows(t.db, res.operationId))[0]!.step_key;
    provider.injectFault({ method: 'POST', path: /issues\/5\/comments$/, fault: 'timeout-after-write', times: 1 });
    const claim = await claimTaskCreationStep(
      t.db,
      auth,
      { kind: 'remote_contribution_associate', stepKey: key },
      'w1',
    );
    const d = deps(ws.dataDir, ws.workspaceId);
    expect(await defaultStepHandlers.remote_contribution_associate.perform(d.effects, claim, async () => {})).toBe(
      'unknown',
    );
    provider.clearFaults();
    const report = await sweepOnce(d);
    expect(report.reconciled.succeeded).toBeGreaterThanOrEqual(1);
    const [row] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE id = ?', [
      claim.stepId,
    ]);
    expect(row!.state).toBe('succeeded');
    expect(provider.comments('acme/app', 5).filter((c) => c.body.includes(res.task.id))).toHaveLength(1);
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  });
});

describe('recovery actions run by the sweep', () => {
  const opState = async (operationId: string) => {
    const [op] = await sql<{ state: string; recovery_generation: number; abort_cause: string | null }>(
      t.db,
      'SELECT state, recovery_generation, abort_cause FROM task_creation_operations WHERE id = ?',
      [operationId],
    );
    return { ...op!, recovery_generation: Number(op!.recovery_generation) };
  };

  it('a creation with a permanently failed step and no effect is aborted by the next sweep', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    const key = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!.step_key;
    const claim = await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: key }, 'w');
    await failTaskCreationStep(t.db, claim, permanentFailure(claim));
    const report = await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    expect(report.recovered.abort_preparing).toBe(1);
    expect(report.recoveryConflicts).toBe(0);
    expect(await opState(res.operationId)).toMatchObject({
      state: 'aborted',
      abort_cause: 'step_failed_permanently',
      recovery_generation: 1,
    });
    // Aborted: later sweeps leave it alone.
    expect((await sweepOnce(deps(ws.dataDir, ws.workspaceId))).recoveryCandidates).toBe(0);
  });

  it('a creation that was just active is not raced; once quiet, the sweep completes it', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    // Default quiet period (the lease): the steps were just recorded, a worker may be about to Complete.
    const early = await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    expect(early.recoveryCandidates).toBe(0);
    expect(await opState(res.operationId)).toMatchObject({ state: 'preparing', recovery_generation: 0 });
    const late = await sweepOnce(deps(ws.dataDir, ws.workspaceId, 0));
    expect(late.recovered.complete_preparing).toBe(1);
    expect(await opState(res.operationId)).toMatchObject({ state: 'completed', recovery_generation: 1 });
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
  });
});

describe('lost wake-ups', () => {
  it('a creation whose wake-ups never reached Redis is completed by the sweep alone', async () => {
    const world = await startWorld(t.db, ['steps', 'complete', 'outbox', 'reaper']);
    try {
      // Begin without enqueueing anything: as if the process died after commit, or Redis was flushed.
      const res = await beginTaskCreation(
        t.db,
        world.ws.member,
        {
          workspace_id: world.ws.workspaceId,
          title: 'orphaned wake-up',
          start_agent: true,
          agent_profile_id: world.ws.agentProfileId,
        },
        { dataDir: world.config.dataDir },
      );
      await waitFor('the sweep to drive the creation to completed', async () => {
        const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
          res.operationId,
        ]);
        return op?.state === 'completed';
      });
      expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
    } finally {
      await world.stop();
    }
  });
});

describe('operations recovery cannot move', () => {
  it('are left out of the same reaper’s next sweeps (no batch is filled with them), and looked at by a new one', async () => {
    const ws = await seedWorkspace(t.db);
    const stuck = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    // V7: compensation required on a step that never succeeded — only a bug or tampering reaches this.
    const [step] = await sql<{ id: string }>(
      t.db,
      "SELECT id FROM task_creation_steps WHERE operation_id = ? AND kind = 'session_prepare'",
      [stuck.operationId],
    );
    await sql(t.db, "UPDATE task_creation_steps SET compensation_state = 'required' WHERE id = ?", [step!.id]);
    const reaper = deps(ws.dataDir, ws.workspaceId);

    const first = await sweepOnce(reaper);
    expect(first.recoveryCandidates).toBe(1);
    expect(first.recoveryConflicts).toBe(1);
    // The same reaper backs off from it; nothing else is held up.
    const second = await sweepOnce(reaper);
    expect(second.recoveryCandidates).toBe(0);
    expect(second.recoveryBackedOff).toBe(1);
    // Another reaper (or this one after the back-off) looks again.
    const other = await sweepOnce(deps(ws.dataDir, ws.workspaceId));
    expect(other.recoveryCandidates).toBe(1);
    expect(other.recoveryConflicts).toBe(1);
  });
});

const operationState = async (operationId: string) =>
  (await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [operationId]))[0]!
    .state;

describe('a database fault during recovery', () => {
  it('is not a reason to back off: the same reaper’s next sweep recovers the operation', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    // Recovery's claim (an update of the operation) keeps failing.
    const fault = await deadlockOn(t.db, 'task_creation_operations', 'UPDATE', `NEW.id = '${res.operationId}'`);
    try {
      const reaper = deps(ws.dataDir, ws.workspaceId, 0);
      const faulted = await sweepOnce(reaper);
      expect(faulted).toMatchObject({ recoveryCandidates: 1, recoveryErrors: 1, recoveryConflicts: 0 });
      expect(await operationState(res.operationId)).toBe('preparing');
      // The fault is over: the same reaper looks again at once and completes the creation.
      await fault.off();
      const next = await sweepOnce(reaper);
      expect(next).toMatchObject({ recoveryCandidates: 1, recoveryBackedOff: 0 });
      expect(next.recovered.complete_preparing).toBe(1);
      expect(await operationState(res.operationId)).toBe('completed');
    } finally {
      await fault.drop();
    }
  });

  it('while recovery releases its claim is not a reason to back off either', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    // Only the release (recovery_owner set -> NULL) fails: the claim and the Complete go through.
    const fault = await deadlockOn(
      t.db,
      'task_creation_operations',
      'UPDATE',
      `NEW.id = '${res.operationId}' AND OLD.recovery_owner IS NOT NULL AND NEW.recovery_owner IS NULL`,
    );
    try {
      const reaper = deps(ws.dataDir, ws.workspaceId, 0);
      const faulted = await sweepOnce(reaper);
      expect(faulted.recovered.complete_preparing).toBe(1);
      expect(faulted).toMatchObject({ recoveryCandidates: 1, recoveryConflicts: 0 });
      expect(await operationState(res.operationId)).toBe('completed');
      // The claim was not released: it runs out its lease. The operation is not set aside for an operator.
      await fault.off();
      expect((await sweepOnce(reaper)).recoveryBackedOff).toBe(0);
    } finally {
      await fault.drop();
    }
  });

  it('while an unknown step is resolved leaves it for the next sweep, not for an operator', async () => {
    const { ws, dead } = await diedHoldingSessionPrepare();
    // The lease expiry (running -> unknown) goes through; the resolution from observation keeps failing.
    const fault = await deadlockOn(
      t.db,
      'task_creation_steps',
      'UPDATE',
      `NEW.id = '${dead.stepId}' AND NEW.state <> 'unknown'`,
    );
    const stepState = async () =>
      (await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE id = ?', [dead.stepId]))[0]!
        .state;
    try {
      const reaper = deps(ws.dataDir, ws.workspaceId, 0);
      const faulted = await sweepOnce(reaper);
      expect(faulted).toMatchObject({ expiredSteps: 1, recoveryCandidates: 1, recoveryErrors: 1 });
      expect(faulted.reconciled.stillUnknown).toBe(0);
      expect(await stepState()).toBe('unknown');
      await fault.off();
      const next = await sweepOnce(reaper);
      expect(next).toMatchObject({ recoveryCandidates: 1, recoveryBackedOff: 0 });
      expect(next.reconciled.retry).toBe(1);
      expect(await stepState()).toBe('retry_wait');
    } finally {
      await fault.drop();
    }
  });
});
