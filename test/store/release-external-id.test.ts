/**
 * The external-ID release as a recorded operation (spec `preparing-release`):
 * a completed holder is released in one transaction; a preparing one is
 * claimed (`preparing -> preparing-release`, release `running`) and then
 * applied (`-> preparing`, `release_applied`, release `completed`); busy
 * holders and stale applies are refused with zero writes; nothing may claim,
 * Complete or Abort a creation while it is `preparing-release`; Complete
 * afterwards answers `CreatedIdentityLost`; tier-4 locks go in UUID order.
 * Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { bool, runTransaction } from '../../src/db/tx';
import { armFailpoint, disarmAll } from '../../src/failpoints';
import { releaseExternalId } from '../../src/setup/release-external-id';
import { abortTaskCreation } from '../../src/store/abort';
import { completeTaskCreation } from '../../src/store/complete';
import { applyExternalIdRelease } from '../../src/store/release-apply';
import { claimExternalIdRelease, type ReleaseClaim } from '../../src/store/release-claim';
import { lockReleaseAndOperationLocked } from '../../src/store/release-locks';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { completeTaskCreationStep, failTaskCreationStep } from '../../src/store/step-results';
import { findByExternalId } from '../../src/store/task-view';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { permanentFailure, presentEvidence } from '../support/evidence';
import { begin, driveAllSteps, expectTyped, snapshot, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
afterEach(() => disarmAll());

const agent = (ws: SeededWorkspace) => ({ start_agent: true, agent_profile_id: ws.agentProfileId });

async function holder(externalId: string, body: (ws: SeededWorkspace) => Record<string, unknown> = agent) {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { external_id: externalId, ...body(ws) });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  return { ws, res, auth, snap: () => snapshot(t.db, res.operationId, res.task.id) };
}

async function opRow(id: string) {
  const [row] = await sql<{
    state: string;
    release_operation_id: string | null;
    release_generation: number;
    release_applied: unknown;
  }>(
    t.db,
    'SELECT state, release_operation_id, release_generation, release_applied FROM task_creation_operations WHERE id = ?',
    [id],
  );
  return { ...row!, release_generation: Number(row!.release_generation), release_applied: bool(row!.release_applied) };
}

async function releaseRows(operationId: string) {
  return sql<{
    id: string;
    state: string;
    holder_state: string;
    external_id: string;
    requested_by: string;
    completed_at: Date | null;
    task_id: string;
  }>(
    t.db,
    'SELECT id, state, holder_state, external_id, requested_by, completed_at, task_id FROM external_id_releases WHERE creation_operation_id = ?',
    [operationId],
  );
}

async function claimed(externalId: string, h: Awaited<ReturnType<typeof holder>>): Promise<ReleaseClaim> {
  const r = await claimExternalIdRelease(t.db, h.ws.workspaceId, externalId, 'operator-1');
  if (r.kind !== 'claimed') throw new Error(`expected a claim, got ${r.kind}`);
  return r.claim;
}

describe('a completed holder', () => {
  it('is released in one transaction: a completed release row, the ID cleared, nothing else written', async () => {
    const h = await holder('done-1');
    await driveAllSteps(t.db, h.auth, h.res.operationId, h.ws.dataDir);
    await completeTaskCreation(t.db, h.auth);
    const before = await opRow(h.res.operationId);
    const res = await releaseExternalId(t.db, h.ws.workspaceId, 'done-1', 'operator-1');
    expect(res).toMatchObject({ released: true, task_id: h.res.task.id, release_applied: false });
    const [rel] = await releaseRows(h.res.operationId);
    expect(rel).toMatchObject({
      state: 'completed',
      holder_state: 'completed',
      external_id: 'done-1',
      requested_by: 'operator-1',
      task_id: h.res.task.id,
    });
    expect(rel!.completed_at).not.toBeNull();
    expect(res.released && res.release_id).toBe(rel!.id);
    expect(await opRow(h.res.operationId)).toEqual(before);
    const [task] = await sql<{ external_id: string | null; external_id_settled_at: Date | null; revision: number }>(
      t.db,
      'SELECT external_id, external_id_settled_at, revision FROM tasks WHERE id = ?',
      [h.res.task.id],
    );
    expect(task).toMatchObject({ external_id: null, external_id_settled_at: null });
    expect(Number(task!.revision)).toBe(1);
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [h.res.task.id])).toBe(1);
    expect(await count(t.db, 'task_revisions', 'task_id = ?', [h.res.task.id])).toBe(1);
    expect(await releaseExternalId(t.db, h.ws.workspaceId, 'done-1', 'operator-1')).toEqual({ released: false });
  });
});

describe('a preparing holder', () => {
  it('is claimed into preparing-release, still holding its ID, then applied back to preparing without it', async () => {
    const h = await holder('prep-1');
    const claim = await claimed('prep-1', h);
    expect(claim).toMatchObject({ generation: 1, operationId: h.res.operationId, taskId: h.res.task.id });
    expect(await opRow(h.res.operationId)).toEqual({
      state: 'preparing-release',
      release_operation_id: claim.releaseId,
      release_generation: 1,
      release_applied: false,
    });
    expect(await releaseRows(h.res.operationId)).toMatchObject([
      { id: claim.releaseId, state: 'running', holder_state: 'preparing', completed_at: null },
    ]);
    // Before the apply the holder still has the ID: lookups and a retried create find it, unsettled.
    expect(await findByExternalId(t.db, h.ws.workspaceId, 'prep-1')).toMatchObject({
      id: h.res.task.id,
      creation_complete: false,
    });
    const again = await begin(t.db, h.ws, { external_id: 'prep-1' });
    expect(again).toMatchObject({ outcome: 'FoundUnsettled', operationId: h.res.operationId });

    const applied = await applyExternalIdRelease(t.db, claim);
    expect(applied).toEqual({
      releaseId: claim.releaseId,
      operationId: h.res.operationId,
      taskId: h.res.task.id,
      replayed: false,
    });
    expect(await opRow(h.res.operationId)).toEqual({
      state: 'preparing',
      release_operation_id: claim.releaseId,
      release_generation: 1,
      release_applied: true,
    });
    const [rel] = await releaseRows(h.res.operationId);
    expect(rel).toMatchObject({ state: 'completed' });
    expect(rel!.completed_at).not.toBeNull();
    expect(await findByExternalId(t.db, h.ws.workspaceId, 'prep-1')).toBeNull();
    expect(await count(t.db, 'task_revisions', 'task_id = ?', [h.res.task.id])).toBe(0);
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [h.res.task.id])).toBe(0);

    // A second apply of the same release (the reaper after the releaser) replays without writing.
    const before = await h.snap();
    expect(await applyExternalIdRelease(t.db, claim)).toMatchObject({ replayed: true });
    expect(await h.snap()).toBe(before);
  });

  it('a stale apply (another generation) is stale_claim and an unknown release not_found, both with zero writes', async () => {
    const h = await holder('stale-1');
    const claim = await claimed('stale-1', h);
    const before = await h.snap();
    await expectTyped(applyExternalIdRelease(t.db, { ...claim, generation: claim.generation + 1 }), 'stale_claim');
    await expectTyped(applyExternalIdRelease(t.db, { ...claim, generation: 0 }), 'stale_claim');
    await expectTyped(applyExternalIdRelease(t.db, { releaseId: randomUUID(), generation: 1 }), 'not_found');
    expect(await h.snap()).toBe(before);
    expect((await applyExternalIdRelease(t.db, claim)).replayed).toBe(false);
  });

  it('nothing claims a step, Completes or Aborts it while preparing-release; a second release is refused', async () => {
    const h = await holder('locked-1');
    const rows = await stepRows(t.db, h.res.operationId);
    const session = rows.find((r) => r.kind === 'session_prepare')!;
    await claimed('locked-1', h);
    const before = await h.snap();
    await expectTyped(
      claimTaskCreationStep(t.db, h.auth, { kind: 'session_prepare', stepKey: session.step_key }, 'w1'),
      'creation_state_conflict',
    );
    await expectTyped(completeTaskCreation(t.db, h.auth), 'creation_state_conflict');
    await expectTyped(abortTaskCreation(t.db, h.auth, 'caller_gave_up'), 'creation_state_conflict');
    await expectTyped(releaseExternalId(t.db, h.ws.workspaceId, 'locked-1', 'operator-2'), 'creation_state_conflict');
    expect(await h.snap()).toBe(before);
  });

  it('finished before the release, it completes only after the apply, as CreatedIdentityLost; the ID then makes a new task', async () => {
    const h = await holder('lost-1');
    await driveAllSteps(t.db, h.auth, h.res.operationId, h.ws.dataDir);
    const claim = await claimed('lost-1', h);
    await expectTyped(completeTaskCreation(t.db, h.auth), 'creation_state_conflict');
    await applyExternalIdRelease(t.db, claim);
    const done = await completeTaskCreation(t.db, h.auth);
    expect(done.outcome).toBe('CreatedIdentityLost');
    const [ev] = await sql<{ payload_json: string }>(t.db, 'SELECT payload_json FROM event_outbox WHERE task_id = ?', [
      h.res.task.id,
    ]);
    expect(JSON.parse(ev!.payload_json).external_id).toBeNull();
    const next = await begin(t.db, h.ws, { external_id: 'lost-1' });
    expect(next.outcome).toBe('Created');
    expect(next.task.id).not.toBe(h.res.task.id);
  });
});

describe('busy holders are refused with zero writes', () => {
  it('a running step', async () => {
    const h = await holder('busy-run');
    const key = (await stepRows(t.db, h.res.operationId)).find((r) => r.kind === 'session_prepare')!.step_key;
    await claimTaskCreationStep(t.db, h.auth, { kind: 'session_prepare', stepKey: key }, 'w1');
    const before = await h.snap();
    await expectTyped(releaseExternalId(t.db, h.ws.workspaceId, 'busy-run', 'operator-1'), 'creation_state_conflict');
    expect(await h.snap()).toBe(before);
  });

  it('a pending compensation', async () => {
    const h = await holder('busy-comp', (ws) => ({ ...agent(ws), repositories: [{ repository_id: ws.repositoryId }] }));
    const rows = await stepRows(t.db, h.res.operationId);
    const key = (kind: string) => rows.find((r) => r.kind === kind)!.step_key;
    const session = await claimTaskCreationStep(
      t.db,
      h.auth,
      { kind: 'session_prepare', stepKey: key('session_prepare') },
      'w1',
    );
    await completeTaskCreationStep(t.db, session, { evidence: presentEvidence(session) });
    const branch = await claimTaskCreationStep(
      t.db,
      h.auth,
      { kind: 'fresh_branch_prepare', stepKey: key('fresh_branch_prepare') },
      'w1',
    );
    await failTaskCreationStep(t.db, branch, permanentFailure(branch));
    expect(
      (await stepRows(t.db, h.res.operationId)).find((r) => r.kind === 'session_prepare')!.compensation_state,
    ).toBe('required');
    const before = await h.snap();
    await expectTyped(releaseExternalId(t.db, h.ws.workspaceId, 'busy-comp', 'operator-1'), 'creation_state_conflict');
    expect(await h.snap()).toBe(before);
  });

  it("a creation between Complete's phases", async () => {
    const h = await holder('busy-completing');
    await driveAllSteps(t.db, h.auth, h.res.operationId, h.ws.dataDir);
    armFailpoint('between_complete_phase_a_and_b', { kind: 'throw' }, { times: 1 });
    await expect(completeTaskCreation(t.db, h.auth)).rejects.toThrow(/failpoint/);
    expect((await opRow(h.res.operationId)).state).toBe('completing');
    const before = await h.snap();
    await expectTyped(
      releaseExternalId(t.db, h.ws.workspaceId, 'busy-completing', 'operator-1'),
      'creation_state_conflict',
    );
    expect(await h.snap()).toBe(before);
  });
});

describe('the releaser crashing between claim and apply', () => {
  it('leaves the creation preparing-release with its running release, still holding the ID', async () => {
    const h = await holder('crash-1');
    armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
    await expect(releaseExternalId(t.db, h.ws.workspaceId, 'crash-1', 'operator-1')).rejects.toThrow(
      /between_release_claim_and_apply/,
    );
    const op = await opRow(h.res.operationId);
    expect(op).toMatchObject({ state: 'preparing-release', release_generation: 1, release_applied: false });
    expect(await releaseRows(h.res.operationId)).toMatchObject([{ id: op.release_operation_id, state: 'running' }]);
    expect(await findByExternalId(t.db, h.ws.workspaceId, 'crash-1')).toMatchObject({ id: h.res.task.id });
  });
});

describe('tier 4', () => {
  it('a release row and its creation operation are locked in ascending UUID order, whatever their tables', async () => {
    const h = await holder('order-1');
    const low = '00000000-0000-4000-8000-000000000000';
    const high = 'ffffffff-ffff-4fff-bfff-ffffffffffff';
    for (const releaseId of [low, high]) {
      const trail = await runTransaction(t.db, 'test', async (tx) => {
        await lockReleaseAndOperationLocked(tx, releaseId, h.res.operationId, async () => 'row');
        tx.rollbackOnly();
        return tx.locks.acquisitions();
      });
      const ids = trail.map((k) => k.split('|')[1]!.split(':')[0]);
      expect(ids).toEqual([releaseId, h.res.operationId].sort());
    }
    await expectTyped(
      runTransaction(t.db, 'test', async (tx) => {
        tx.lockOperationRow('task_creation_operations', high);
        tx.lockOperationRow('external_id_releases', low);
      }),
      'lock_order_violation',
    );
  });
});
