/**
 * RecoverTaskCreation: each RecoveryAction runs from the state that makes it
 * the one legal action, under a persisted recovery claim that is released
 * afterwards; `replay_terminal`, a live step claim, another live recovery
 * claim and an invariant violation write nothing. A step worker that records
 * a permanent failure aborts the creation at once. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stepJobId } from '../../queues/names';
import { configFromEnv } from '../../src/app/config';
import { actorBindingHash } from '../../src/canonical/hash';
import { QueueSet } from '../../src/coordinator/queues';
import { processStepJob } from '../../src/coordinator/step-worker';
import type { StepKind } from '../../src/domain/vocab';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createProviderRegistry } from '../../src/providers/registry';
import {
  recoverOperation,
  recoverUntilSettled,
  RECOVERY_ABORT_CAUSE,
  type RecoverDeps,
} from '../../src/runtime/recover';
import { createRedis } from '../../src/runtime/redis';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandler } from '../../src/kinds/contract';
import { completeTaskCreation } from '../../src/store/complete';
import { expireTaskCreationLeases } from '../../src/store/lease-expiry';
import { claimTaskCreationRecovery, finishTaskCreationRecovery, recoveryActorDocument } from '../../src/store/recovery';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { failTaskCreationStep } from '../../src/store/step-results';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { begin, driveAllSteps, expectTyped, snapshot, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
let provider: FakeProviderServer;
let queues: QueueSet;
beforeAll(async () => {
  provider = await startFakeProviderServer();
  queues = new QueueSet(createRedis(configFromEnv().redisUrl), `tl-recover-${randomUUID().slice(0, 8)}`);
});
afterAll(async () => {
  await provider?.close();
  if (queues) {
    await Promise.all(queues.all().map((q) => q.obliterate({ force: true })));
    await queues.close();
    queues.connection.disconnect();
  }
});

function effects(dataDir: string) {
  return {
    db: t.db,
    dataDir,
    providers: createProviderRegistry({ timeoutMs: 3000 }),
    log: silentLogger(),
    timeoutMs: 3000,
  };
}

function deps(ws: SeededWorkspace, actor = 'recovery:test', withQueues = false): RecoverDeps {
  return {
    effects: effects(ws.dataDir),
    handlers: defaultStepHandlers,
    queues: withQueues ? queues : null,
    log: silentLogger(),
    actor,
  };
}

const ago = () => (t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE');

async function opRow(operationId: string) {
  const [row] = await sql<{
    state: string;
    abort_cause: string | null;
    recovery_action: string | null;
    recovery_generation: number;
    recovery_owner: string | null;
    recovery_lease_expires_at: Date | null;
    recovery_actor_binding_hash: string | null;
    workspace_id: string;
    generation: number;
  }>(
    t.db,
    `SELECT state, abort_cause, recovery_action, recovery_generation, recovery_owner, recovery_lease_expires_at,
            recovery_actor_binding_hash, workspace_id, generation FROM task_creation_operations WHERE id = ?`,
    [operationId],
  );
  return { ...row!, recovery_generation: Number(row!.recovery_generation), generation: Number(row!.generation) };
}

/** Every row the ledger holds for one creation, including its dispatch claims (for "zero writes"). */
async function dump(operationId: string, taskId: string): Promise<string> {
  const claims = await sql(t.db, 'SELECT * FROM task_launch_dispatch_claims WHERE creation_operation_id = ?', [
    operationId,
  ]);
  return (await snapshot(t.db, operationId, taskId)) + JSON.stringify(claims);
}

/** A creation with a session and a launch intent (database effects only). */
async function sessionCreation() {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const stepOf = async (kind: StepKind) => (await stepRows(t.db, res.operationId)).find((r) => r.kind === kind)!;
  return { ws, res, auth, stepOf };
}

/** The claim is released and records the action, its generation and the recovery actor's binding hash. */
async function expectReleasedClaim(operationId: string, action: string, owner: string, generation = 1) {
  const op = await opRow(operationId);
  expect(op.recovery_action).toBe(action);
  expect(op.recovery_generation).toBe(generation);
  expect(op.recovery_owner).toBeNull();
  expect(op.recovery_lease_expires_at).toBeNull();
  const doc = recoveryActorDocument(
    { id: operationId, workspace_id: op.workspace_id, generation: op.generation },
    owner,
    generation,
  );
  expect(doc).toMatchObject({ variant: 'operation_recovery', authority_id: operationId, lease_generation: generation });
  expect(op.recovery_actor_binding_hash).toBe(actorBindingHash(doc));
}

describe('each RecoveryAction from its state', () => {
  it('reconcile_unknown_step: an expired claim with no effect resolves to retry_wait from absent proof', async () => {
    const c = await sessionCreation();
    const step = await c.stepOf('session_prepare');
    await claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: step.step_key }, 'dead-worker');
    await sql(t.db, `UPDATE task_creation_steps SET lease_expires_at = ${ago()} WHERE id = ?`, [step.id]);
    expect((await expireTaskCreationLeases(t.db, c.res.operationId)).steps).toBe(1);

    const out = await recoverOperation(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(out).toMatchObject({ action: 'reconcile_unknown_step', progressed: true, skipped: null });
    expect(out.reconciled).toEqual({ succeeded: 0, retry: 1, stillUnknown: 0 });
    expect((await c.stepOf('session_prepare')).state).toBe('retry_wait');
    await expectReleasedClaim(c.res.operationId, 'reconcile_unknown_step', 'reaper-a');
  });

  it('resume_preparing: a creation whose wake-ups were lost gets them again', async () => {
    const c = await sessionCreation();
    const before = await stepRows(t.db, c.res.operationId);
    const out = await recoverOperation(deps(c.ws, 'reaper-a', true), c.res.operationId);
    expect(out).toMatchObject({ action: 'resume_preparing', progressed: false });
    const session = before.find((r) => r.kind === 'session_prepare')!;
    const job = await queues.step('session_prepare').getJob(stepJobId(session.id, Number(session.generation)));
    expect(job?.data).toMatchObject({ operationId: c.res.operationId, stepId: session.id });
    // The launch intent waits for the other steps: no wake-up for it yet.
    const launch = before.find((r) => r.kind === 'launch_intent')!;
    expect(await queues.step('launch_intent').getJob(stepJobId(launch.id, Number(launch.generation)))).toBeUndefined();
    expect(await stepRows(t.db, c.res.operationId)).toEqual(before);
    await expectReleasedClaim(c.res.operationId, 'resume_preparing', 'reaper-a');
  });

  it('complete_preparing: every step done, Complete not run: one task.created', async () => {
    const c = await sessionCreation();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    const out = await recoverOperation(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(out).toMatchObject({ action: 'complete_preparing', progressed: true, detail: null });
    expect((await opRow(c.res.operationId)).state).toBe('completed');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [c.res.task.id])).toBe(1);
    await expectReleasedClaim(c.res.operationId, 'complete_preparing', 'reaper-a');
    // The caller's own Complete replays.
    expect(await completeTaskCreation(t.db, c.auth)).toMatchObject({ outcome: 'Created', replayed: true });
  });

  it('complete_completing: a crash between Complete phase A and B is finished, with one task.created', async () => {
    const c = await sessionCreation();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    armFailpoint('between_complete_phase_a_and_b', { kind: 'throw' });
    try {
      await expect(completeTaskCreation(t.db, c.auth)).rejects.toBeInstanceOf(FailpointError);
    } finally {
      disarmAll();
    }
    expect((await opRow(c.res.operationId)).state).toBe('completing');
    const out = await recoverOperation(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(out).toMatchObject({ action: 'complete_completing', progressed: true, detail: null });
    expect((await opRow(c.res.operationId)).state).toBe('completed');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [c.res.task.id])).toBe(1);
    await expectReleasedClaim(c.res.operationId, 'complete_completing', 'reaper-a');
  });

  it('abort_preparing: a permanently failed step with no effect anywhere aborts, deleting the partial task', async () => {
    const c = await sessionCreation();
    const step = await c.stepOf('session_prepare');
    const claim = await claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: step.step_key }, 'w');
    expect(await failTaskCreationStep(t.db, claim, permanentFailure(claim))).toBe('failed');
    const out = await recoverOperation(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(out).toMatchObject({ action: 'abort_preparing', progressed: true, detail: null });
    const op = await opRow(c.res.operationId);
    expect(op).toMatchObject({ state: 'aborted', abort_cause: RECOVERY_ABORT_CAUSE });
    expect(await count(t.db, 'tasks', 'id = ?', [c.res.task.id])).toBe(0);
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [c.res.task.id])).toBe(0);
    await expectReleasedClaim(c.res.operationId, 'abort_preparing', 'reaper-a');
  });

  it('retry_compensation: a succeeded effect beside a permanent failure is handed to the compensation runner under a claim', async () => {
    const c = await sessionCreation();
    const session = await c.stepOf('session_prepare');
    const s = await claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: session.step_key }, 'w');
    expect(
      await (defaultStepHandlers.session_prepare as StepHandler).perform(effects(c.ws.dataDir), s, async () => {}),
    ).toBe('succeeded');
    const launch = await c.stepOf('launch_intent');
    const l = await claimTaskCreationStep(t.db, c.auth, { kind: 'launch_intent', stepKey: launch.step_key }, 'w');
    await failTaskCreationStep(t.db, l, permanentFailure(l));
    expect((await c.stepOf('session_prepare')).compensation_state).toBe('required');
    const out = await recoverOperation(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(out.action).toBe('retry_compensation');
    expect(out.compensation).not.toBeNull();
    await expectReleasedClaim(c.res.operationId, 'retry_compensation', 'reaper-a');
  });

  it('compensate, then abort: recoverUntilSettled undoes the succeeded session and aborts the creation', async () => {
    const c = await sessionCreation();
    const session = await c.stepOf('session_prepare');
    const s = await claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: session.step_key }, 'w');
    await (defaultStepHandlers.session_prepare as StepHandler).perform(effects(c.ws.dataDir), s, async () => {});
    const launch = await c.stepOf('launch_intent');
    const l = await claimTaskCreationStep(t.db, c.auth, { kind: 'launch_intent', stepKey: launch.step_key }, 'w');
    await failTaskCreationStep(t.db, l, permanentFailure(l));
    const outs = await recoverUntilSettled(deps(c.ws, 'reaper-a'), c.res.operationId);
    expect(outs.map((o) => o.action)).toEqual(['retry_compensation', 'abort_preparing', null]);
    expect(outs[0]!.compensation).toMatchObject({ compensated: 1 });
    expect((await c.stepOf('session_prepare')).compensation_state).toBe('compensated');
    expect(await opRow(c.res.operationId)).toMatchObject({ state: 'aborted', recovery_generation: 2 });
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [c.res.task.id])).toBe(0);
  });
});

describe('no action, zero writes', () => {
  it('replay_terminal: a completed and an aborted creation are left byte-identical', async () => {
    const done = await sessionCreation();
    await driveAllSteps(t.db, done.auth, done.res.operationId, done.ws.dataDir);
    await completeTaskCreation(t.db, done.auth);
    const failed = await sessionCreation();
    const step = await failed.stepOf('session_prepare');
    const claim = await claimTaskCreationStep(
      t.db,
      failed.auth,
      { kind: 'session_prepare', stepKey: step.step_key },
      'w',
    );
    await failTaskCreationStep(t.db, claim, permanentFailure(claim));
    expect((await recoverOperation(deps(failed.ws), failed.res.operationId)).action).toBe('abort_preparing');

    for (const c of [done, failed]) {
      const before = await dump(c.res.operationId, c.res.task.id);
      const out = await recoverOperation(deps(c.ws, 'reaper-b'), c.res.operationId);
      expect(out).toMatchObject({ action: null, skipped: 'replay_terminal', progressed: false });
      expect(await claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-b')).toMatchObject({
        claimed: false,
        decision: { action: 'replay_terminal' },
      });
      expect(await dump(c.res.operationId, c.res.task.id)).toBe(before);
    }
  });

  it('a step under a live claim: claim_in_flight, nothing claimed', async () => {
    const c = await sessionCreation();
    const step = await c.stepOf('session_prepare');
    await claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: step.step_key }, 'alive', 60_000);
    const before = await dump(c.res.operationId, c.res.task.id);
    const out = await recoverOperation(deps(c.ws), c.res.operationId);
    expect(out).toMatchObject({ action: null, skipped: 'claim_in_flight' });
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(before);
  });

  it('an invariant violation is a typed creation_state_conflict with zero writes', async () => {
    const c = await sessionCreation();
    // V7: compensation required on a step that never succeeded (only a bug or tampering can reach this).
    const step = await c.stepOf('session_prepare');
    await sql(t.db, "UPDATE task_creation_steps SET compensation_state = 'required' WHERE id = ?", [step.id]);
    const before = await dump(c.res.operationId, c.res.task.id);
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-a'), 'creation_state_conflict');
    const out = await recoverOperation(deps(c.ws), c.res.operationId);
    expect(out).toMatchObject({ action: null, skipped: 'creation_state_conflict' });
    expect(out.detail).toMatch(/V7/);
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(before);
  });

  it('a tampered stored plan is refused before any claim is written', async () => {
    const c = await sessionCreation();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, 'UPDATE task_creation_operations SET manifest_hash = ? WHERE id = ?', [
      '0'.repeat(64),
      c.res.operationId,
    ]);
    const before = await dump(c.res.operationId, c.res.task.id);
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-a'), 'handle_mismatch');
    expect((await recoverOperation(deps(c.ws), c.res.operationId)).action).toBeNull();
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(before);
  });

  it('bad input is refused before anything is read or written', async () => {
    const c = await sessionCreation();
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, ''), 'invalid_request');
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'x'.repeat(201)), 'invalid_request');
    await expectTyped(claimTaskCreationRecovery(t.db, 'not-a-uuid', 'reaper-a'), 'invalid_request');
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-a', 0), 'invalid_request');
    expect((await opRow(c.res.operationId)).recovery_generation).toBe(0);
  });

  it('an expected action that is no longer the legal one (a stale ledger-view page) is a typed conflict, zero writes', async () => {
    const c = await sessionCreation();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    // The page showed resume_preparing, but every step is done now: complete_preparing is legal.
    const before = await dump(c.res.operationId, c.res.task.id);
    const stale = await recoverOperation(deps(c.ws, 'operator:admin'), c.res.operationId, {
      expectedAction: 'resume_preparing',
    });
    expect(stale).toMatchObject({ action: null, skipped: 'creation_state_conflict', progressed: false });
    expect(stale.detail).toContain('complete_preparing');
    expect(stale.detail).toContain('resume_preparing');
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(before);
    // The action the page showed, when it is still the legal one, runs under the reaper's claim.
    const ran = await recoverOperation(deps(c.ws, 'operator:admin'), c.res.operationId, {
      expectedAction: 'complete_preparing',
    });
    expect(ran).toMatchObject({ action: 'complete_preparing', progressed: true, detail: null });
    await expectReleasedClaim(c.res.operationId, 'complete_preparing', 'operator:admin');
    // Terminal now: only replay_terminal is legal, and expecting it claims nothing.
    await expectTyped(
      claimTaskCreationRecovery(t.db, c.res.operationId, 'operator:admin', 30_000, {
        expectedAction: 'complete_preparing',
      }),
      'creation_state_conflict',
    );
    expect((await opRow(c.res.operationId)).recovery_generation).toBe(1);
  });
});

describe('the recovery claim fences reapers', () => {
  it('a live claim refuses another owner; after its lease expires a takeover fences the old owner', async () => {
    const c = await sessionCreation();
    const a = await claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-a', 60_000);
    expect(a).toMatchObject({ claimed: true, action: 'resume_preparing', generation: 1, owner: 'reaper-a' });
    const held = await dump(c.res.operationId, c.res.task.id);
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-b'), 'stale_claim');
    // Even the same owner does not claim twice while its lease is live.
    await expectTyped(claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-a'), 'stale_claim');
    expect((await recoverOperation(deps(c.ws, 'reaper-b'), c.res.operationId)).skipped).toBe('stale_claim');
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(held);

    await sql(t.db, `UPDATE task_creation_operations SET recovery_lease_expires_at = ${ago()} WHERE id = ?`, [
      c.res.operationId,
    ]);
    const b = await claimTaskCreationRecovery(t.db, c.res.operationId, 'reaper-b');
    expect(b).toMatchObject({ claimed: true, generation: 2, owner: 'reaper-b' });
    if (!a.claimed || !b.claimed) throw new Error('unreachable');
    const taken = await dump(c.res.operationId, c.res.task.id);
    await expectTyped(finishTaskCreationRecovery(t.db, a), 'stale_claim');
    await expectTyped(finishTaskCreationRecovery(t.db, { ...b, owner: 'reaper-a' }), 'stale_claim');
    expect(await dump(c.res.operationId, c.res.task.id)).toBe(taken);
    await finishTaskCreationRecovery(t.db, b);
    await expectTyped(finishTaskCreationRecovery(t.db, b), 'stale_claim');
    await expectReleasedClaim(c.res.operationId, 'resume_preparing', 'reaper-b', 2);
  });
});

describe('a step worker that records a permanent failure', () => {
  it('aborts the creation right away, without a sweep', async () => {
    const ws = await seedWorkspace(t.db);
    // The fake provider knows no such pull request: the provider answers 404, a permanent failure.
    await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', ['acme/none', ws.repositoryId]);
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
          contribution_id: '404',
        },
      ],
    });
    const [step] = await stepRows(t.db, res.operationId);
    const state = await processStepJob(
      {
        effects: effects(ws.dataDir),
        handlers: defaultStepHandlers,
        queues,
        log: silentLogger(),
        metrics: null,
        workerId: 'step-worker-test',
        leaseMs: 10_000,
      },
      {
        operationId: res.operationId,
        stepId: step!.id,
        kind: 'remote_contribution_associate',
        stepKey: step!.step_key,
        generation: Number(step!.generation),
      },
      'job-1',
    );
    expect(state).toBe('failed');
    const op = await opRow(res.operationId);
    expect(op).toMatchObject({ state: 'aborted', abort_cause: RECOVERY_ABORT_CAUSE });
    await expectReleasedClaim(res.operationId, 'abort_preparing', 'step-worker-test/recover');
    expect(await count(t.db, 'task_remote_contribution_associations', 'operation_id = ?', [res.operationId])).toBe(0);
  });
});
