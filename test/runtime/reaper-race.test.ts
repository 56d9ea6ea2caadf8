/**
 * Two reapers on the same operations at the same time: the recovery claim
 * lets exactly one run each action (one recovery generation, one Complete →
 * one task.created, one Abort), the other is fenced (`stale_claim`) or finds
 * the action already done (`replay_terminal`). Repeated over fresh
 * operations. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { recoverOperation } from '../../src/runtime/recover';
import { sweepOnce, type ReaperDeps } from '../../src/runtime/reaper';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { failTaskCreationStep } from '../../src/store/step-results';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { testReaper } from '../support/reaper';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb(10);
const ROUNDS = 10;

function reaper(ws: SeededWorkspace, actor: string): ReaperDeps {
  return testReaper(t.db, ws, actor, { quietMs: 0 });
}

/** A creation whose steps all succeeded: Complete is the one legal action. */
async function ready(ws: SeededWorkspace) {
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  return res;
}

/** A creation whose first step failed permanently with no effect: Abort is the one legal action. */
async function failed(ws: SeededWorkspace) {
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const step = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'session_prepare')!;
  const claim = await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: step.step_key }, 'w');
  await failTaskCreationStep(t.db, claim, permanentFailure(claim));
  return res;
}

async function recovery(operationId: string) {
  const [row] = await sql<{ state: string; recovery_generation: number; recovery_action: string | null }>(
    t.db,
    'SELECT state, recovery_generation, recovery_action FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  return { ...row!, recovery_generation: Number(row!.recovery_generation) };
}

describe('two reapers, one operation', () => {
  it(`complete_preparing runs exactly once (${ROUNDS} fresh operations)`, async () => {
    const ws = await seedWorkspace(t.db);
    for (let i = 0; i < ROUNDS; i++) {
      const res = await ready(ws);
      const outs = await Promise.all([
        recoverOperation(reaper(ws, 'reaper-a'), res.operationId),
        recoverOperation(reaper(ws, 'reaper-b'), res.operationId),
      ]);
      expect(outs.filter((o) => o.action === 'complete_preparing')).toHaveLength(1);
      const loser = outs.find((o) => o.action === null)!;
      expect(['stale_claim', 'replay_terminal']).toContain(loser.skipped);
      expect(await recovery(res.operationId)).toMatchObject({
        state: 'completed',
        recovery_generation: 1,
        recovery_action: 'complete_preparing',
      });
      expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
    }
  });

  it(`abort_preparing runs exactly once (${ROUNDS} fresh operations)`, async () => {
    const ws = await seedWorkspace(t.db);
    for (let i = 0; i < ROUNDS; i++) {
      const res = await failed(ws);
      const outs = await Promise.all([
        recoverOperation(reaper(ws, 'reaper-a'), res.operationId),
        recoverOperation(reaper(ws, 'reaper-b'), res.operationId),
      ]);
      expect(outs.filter((o) => o.action === 'abort_preparing')).toHaveLength(1);
      const loser = outs.find((o) => o.action === null)!;
      expect(['stale_claim', 'replay_terminal']).toContain(loser.skipped);
      expect(await recovery(res.operationId)).toMatchObject({
        state: 'aborted',
        recovery_generation: 1,
        recovery_action: 'abort_preparing',
      });
    }
  });

  it('two concurrent sweeps over one workspace complete and abort each operation exactly once', async () => {
    for (let round = 0; round < 3; round++) {
      const ws = await seedWorkspace(t.db);
      const toComplete = [await ready(ws), await ready(ws), await ready(ws)];
      const toAbort = [await failed(ws), await failed(ws)];
      const [a, b] = await Promise.all([sweepOnce(reaper(ws, 'reaper-a')), sweepOnce(reaper(ws, 'reaper-b'))]);
      expect(a.recovered.complete_preparing + b.recovered.complete_preparing).toBe(toComplete.length);
      expect(a.recovered.abort_preparing + b.recovered.abort_preparing).toBe(toAbort.length);
      for (const res of toComplete) {
        expect(await recovery(res.operationId)).toMatchObject({ state: 'completed', recovery_generation: 1 });
        expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
      }
      for (const res of toAbort) {
        expect(await recovery(res.operationId)).toMatchObject({ state: 'aborted', recovery_generation: 1 });
      }
    }
  });
});
