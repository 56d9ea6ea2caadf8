/**
 * Every step transition of the Store, legal and illegal: claims, leases,
 * stale generations and owners, evidence binding, failure classes, launch
 * arming, and operator resolution of `unknown`. Illegal ones must be typed
 * conflicts with zero writes. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { describe, expect, it } from 'vitest';
import { claimTaskCreationStep, renewTaskCreationStepLease } from '../../src/store/step-claims';
import {
  armLaunchIntent,
  completeTaskCreationStep,
  failTaskCreationStep,
  resolveTaskCreationStep,
} from '../../src/store/step-results';
import type { OperationAuthority, StepClaim } from '../../src/store/types';
import { sql, useTestDb } from '../support/db';
import {
  absentEvidence,
  ambiguousFailure,
  permanentFailure,
  presentEvidence,
  transientFailure,
} from '../support/evidence';
import { begin, expectTyped, snapshot, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

async function setup(body: Record<string, unknown> = {}) {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    contributions: [
      {
        provider: 'github',
        connection_id: ws.connectionId,
        repository_id: ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: '7',
      },
    ],
    ...body,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const rows = await stepRows(t.db, res.operationId);
  const key = (kind: string) => rows.find((r) => r.kind === kind)!.step_key;
  return { ws, res, auth, key, snap: () => snapshot(t.db, res.operationId, res.task.id) };
}

function backdateLease(stepId: string) {
  const past = t.db.dialect === 'postgres' ? "now() - interval '1 hour'" : 'NOW(3) - INTERVAL 1 HOUR';
  return sql(t.db, `UPDATE task_creation_steps SET lease_expires_at = ${past} WHERE id = ?`, [stepId]);
}

describe('claim', () => {
  it('moves planned -> running with generation, attempt and a database-clock lease', async () => {
    const s = await setup();
    const claim = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'session_prepare', stepKey: s.key('session_prepare') },
      'w1',
      60_000,
    );
    expect(claim.generation).toBe(1);
    expect(claim.leaseExpiresAt!.getTime()).toBeGreaterThan(Date.now() + 30_000);
    const [row] = await sql<{ state: string; generation: number; attempt: number; lease_owner: string }>(
      t.db,
      'SELECT state, generation, attempt, lease_owner FROM task_creation_steps WHERE id = ?',
      [claim.stepId],
    );
    expect(row).toMatchObject({ state: 'running', lease_owner: 'w1' });
    expect(Number(row!.generation)).toBe(1);
    expect(Number(row!.attempt)).toBe(1);
  });

  it('refuses a second claim of a running step, with zero writes', async () => {
    const s = await setup();
    const ref = { kind: 'session_prepare' as const, stepKey: s.key('session_prepare') };
    await claimTaskCreationStep(t.db, s.auth, ref, 'w1');
    const before = await s.snap();
    await expectTyped(claimTaskCreationStep(t.db, s.auth, ref, 'w2'), 'creation_state_conflict');
    expect(await s.snap()).toBe(before);
  });

  it('refuses the launch intent until every other step succeeded', async () => {
    const s = await setup();
    const launch = { kind: 'launch_intent' as const, stepKey: s.key('launch_intent') };
    const before = await s.snap();
    await expectTyped(claimTaskCreationStep(t.db, s.auth, launch, 'w1'), 'creation_state_conflict');
    expect(await s.snap()).toBe(before);
    for (const kind of ['session_prepare', 'remote_contribution_associate'] as const) {
      const c = await claimTaskCreationStep(t.db, s.auth, { kind, stepKey: s.key(kind) }, 'w1');
      await completeTaskCreationStep(t.db, c, { evidence: presentEvidence(c) });
    }
    const claim = await claimTaskCreationStep(t.db, s.auth, launch, 'w1');
    await expectTyped(
      completeTaskCreationStep(t.db, claim, { evidence: presentEvidence(claim) }),
      'creation_state_conflict',
    );
    await armLaunchIntent(t.db, claim, presentEvidence(claim));
    const rows = await stepRows(t.db, s.res.operationId);
    expect(rows.find((r) => r.kind === 'launch_intent')!.state).toBe('armed');
  });

  it('rejects an unknown step key', async () => {
    const s = await setup();
    await expectTyped(
      claimTaskCreationStep(t.db, s.auth, { kind: 'session_prepare', stepKey: 'nope' }, 'w1'),
      'not_found',
    );
  });
});

describe('recording results by compare-and-set', () => {
  async function claimed() {
    const s = await setup();
    const claim = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'session_prepare', stepKey: s.key('session_prepare') },
      'w1',
    );
    return { ...s, claim };
  }

  it('completes a live claim with canonical evidence', async () => {
    const s = await claimed();
    await completeTaskCreationStep(t.db, s.claim, { evidence: presentEvidence(s.claim) });
    const [row] = await sql<{
      state: string;
      evidence_json: string;
      evidence_sha256: string;
      lease_owner: string | null;
    }>(t.db, 'SELECT state, evidence_json, evidence_sha256, lease_owner FROM task_creation_steps WHERE id = ?', [
      s.claim.stepId,
    ]);
    expect(row!.state).toBe('succeeded');
    expect(row!.lease_owner).toBeNull();
    expect(row!.evidence_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.parse(row!.evidence_json).kind).toBe('session_prepare');
  });

  it.each([
    ['a stale generation', (c: StepClaim) => ({ ...c, generation: c.generation - 1 })],
    ['a newer generation', (c: StepClaim) => ({ ...c, generation: c.generation + 1 })],
    ['a foreign owner', (c: StepClaim) => ({ ...c, owner: 'intruder' })],
  ])('refuses %s with stale_claim and zero writes', async (_name, mutate) => {
    const s = await claimed();
    const before = await s.snap();
    const bad = mutate(s.claim);
    await expectTyped(completeTaskCreationStep(t.db, bad, { evidence: presentEvidence(s.claim) }), 'stale_claim');
    await expectTyped(failTaskCreationStep(t.db, bad, transientFailure(s.claim)), 'stale_claim');
    await expectTyped(renewTaskCreationStepLease(t.db, bad), 'stale_claim');
    expect(await s.snap()).toBe(before);
  });

  it('refuses an expired lease (the reaper owns it now) with zero writes', async () => {
    const s = await claimed();
    await backdateLease(s.claim.stepId);
    const before = await s.snap();
    await expectTyped(completeTaskCreationStep(t.db, s.claim, { evidence: presentEvidence(s.claim) }), 'stale_claim');
    await expectTyped(renewTaskCreationStepLease(t.db, s.claim), 'stale_claim');
    expect(await s.snap()).toBe(before);
  });

  it('renews a live lease', async () => {
    const s = await claimed();
    const renewed = await renewTaskCreationStepLease(t.db, s.claim, 120_000);
    expect(renewed.getTime()).toBeGreaterThan(s.claim.leaseExpiresAt!.getTime());
  });

  it('refuses evidence for another step, another request, or a non-present effect', async () => {
    const s = await claimed();
    const before = await s.snap();
    const ev = presentEvidence(s.claim);
    await expectTyped(
      completeTaskCreationStep(t.db, s.claim, { evidence: { ...ev, step_key: 'other' } }),
      'invalid_document',
    );
    await expectTyped(
      completeTaskCreationStep(t.db, s.claim, { evidence: { ...ev, request_sha256: 'f'.repeat(64) } }),
      'invalid_document',
    );
    await expectTyped(
      completeTaskCreationStep(t.db, s.claim, { evidence: absentEvidence(s.claim) }),
      'invalid_document',
    );
    await expectTyped(
      completeTaskCreationStep(t.db, s.claim, { evidence: { ...ev, extra: 1 } as never }),
      'invalid_document',
    );
    expect(await s.snap()).toBe(before);
  });

  it('refuses a claim whose request hash differs from the stored request', async () => {
    const s = await claimed();
    const before = await s.snap();
    const forged = { ...s.claim, requestSha256: 'e'.repeat(64) };
    await expectTyped(
      completeTaskCreationStep(t.db, forged, {
        evidence: { ...presentEvidence(s.claim), request_sha256: 'e'.repeat(64) },
      }),
      'evidence_mismatch',
    );
    expect(await s.snap()).toBe(before);
  });

  it('transient failure -> retry_wait (needs absent proof), then claimable again with the next generation', async () => {
    const s = await claimed();
    await expectTyped(
      failTaskCreationStep(t.db, s.claim, { ...transientFailure(s.claim), evidence: null }),
      'invalid_document',
    );
    expect(await failTaskCreationStep(t.db, s.claim, transientFailure(s.claim))).toBe('retry_wait');
    const again = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'session_prepare', stepKey: s.claim.stepKey },
      'w2',
    );
    expect(again.generation).toBe(2);
    // The first worker's claim is now stale.
    await expectTyped(completeTaskCreationStep(t.db, s.claim, { evidence: presentEvidence(s.claim) }), 'stale_claim');
  });

  it('ambiguous failure -> unknown, which cannot be claimed and is resolved only from proof', async () => {
    const s = await claimed();
    expect(await failTaskCreationStep(t.db, s.claim, ambiguousFailure())).toBe('unknown');
    const ref = { kind: 'session_prepare' as const, stepKey: s.claim.stepKey };
    await expectTyped(claimTaskCreationStep(t.db, s.auth, ref, 'w2'), 'creation_state_conflict');
    const operator: OperationAuthority = { kind: 'operation', operationId: s.res.operationId, actor: 'operator:root' };
    await expectTyped(
      resolveTaskCreationStep(t.db, operator, ref, { resolution: 'succeeded', evidence: absentEvidence(s.claim) }),
      'invalid_document',
    );
    expect(
      await resolveTaskCreationStep(t.db, operator, ref, {
        resolution: 'succeeded',
        evidence: presentEvidence(s.claim),
      }),
    ).toBe('succeeded');
    await expectTyped(
      resolveTaskCreationStep(t.db, operator, ref, { resolution: 'succeeded', evidence: presentEvidence(s.claim) }),
      'creation_state_conflict',
    );
  });

  it('resolves unknown -> retry_wait from absent proof, bumping the generation', async () => {
    const s = await claimed();
    await failTaskCreationStep(t.db, s.claim, ambiguousFailure());
    const ref = { kind: 'session_prepare' as const, stepKey: s.claim.stepKey };
    const operator: OperationAuthority = { kind: 'operation', operationId: s.res.operationId, actor: 'operator:root' };
    expect(
      await resolveTaskCreationStep(t.db, operator, ref, {
        resolution: 'retry_wait',
        evidence: absentEvidence(s.claim),
      }),
    ).toBe('retry_wait');
    const next = await claimTaskCreationStep(t.db, s.auth, ref, 'w3');
    expect(next.generation).toBe(3);
  });

  it('permanent failure -> failed (needs absent proof); succeeded effects now require compensation; no more claims', async () => {
    const s = await setup();
    const session = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'session_prepare', stepKey: s.key('session_prepare') },
      'w1',
    );
    await completeTaskCreationStep(t.db, session, { evidence: presentEvidence(session) });
    const remote = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'remote_contribution_associate', stepKey: s.key('remote_contribution_associate') },
      'w1',
    );
    await expectTyped(
      failTaskCreationStep(t.db, remote, { ...permanentFailure(remote), evidence: null }),
      'invalid_document',
    );
    expect(await failTaskCreationStep(t.db, remote, permanentFailure(remote))).toBe('failed');
    const rows = await stepRows(t.db, s.res.operationId);
    expect(rows.find((r) => r.kind === 'session_prepare')!.compensation_state).toBe('required');
    expect(rows.find((r) => r.kind === 'remote_contribution_associate')!.state).toBe('failed');
    await expectTyped(
      claimTaskCreationStep(t.db, s.auth, { kind: 'launch_intent', stepKey: s.key('launch_intent') }, 'w1'),
      'creation_state_conflict',
    );
  });

  it('a success that lands after a permanent failure is marked for compensation in the same transaction', async () => {
    const s = await setup();
    const session = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'session_prepare', stepKey: s.key('session_prepare') },
      'w1',
    );
    const remote = await claimTaskCreationStep(
      t.db,
      s.auth,
      { kind: 'remote_contribution_associate', stepKey: s.key('remote_contribution_associate') },
      'w2',
    );
    await failTaskCreationStep(t.db, remote, permanentFailure(remote));
    await completeTaskCreationStep(t.db, session, { evidence: presentEvidence(session) });
    const rows = await stepRows(t.db, s.res.operationId);
    expect(rows.find((r) => r.kind === 'session_prepare')).toMatchObject({
      state: 'succeeded',
      compensation_state: 'required',
    });
  });
});
