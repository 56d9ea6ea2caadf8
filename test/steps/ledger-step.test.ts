/**
 * Ledger-only step kinds are claimed, performed and recorded in one
 * transaction (store/ledger-step.ts, docs/adr/0011): the generation and
 * attempt are still raised, the evidence still recorded, validated and
 * hashed; a failure anywhere before COMMIT leaves no trace (not even the
 * claim); a duplicate or premature wake-up conflicts with nothing written.
 * Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { LEDGER_ONLY_KINDS, STEP_KINDS, type StepKind } from '../../src/domain/vocab';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandler } from '../../src/kinds/contract';
import { claimAndApplyLedgerStep } from '../../src/store/ledger-step';
import { useTestDb } from '../support/db';
import { expectTyped, stepRows } from '../support/ledger';
import { createTask, effectSnapshot, expectRecordedInOneClaim, seedWithFiles } from './support';

const t = useTestDb();

async function setup() {
  const { ws } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
  });
  const rows = await stepRows(t.db, c.operationId);
  const run = (kind: StepKind, owner = 'w1') => {
    const row = rows.find((r) => r.kind === kind)!;
    const apply = (defaultStepHandlers[kind] as StepHandler).applyInClaim!;
    return claimAndApplyLedgerStep(t.db, c.auth, { kind, stepKey: row.step_key }, owner, 30_000, apply);
  };
  return { c, rows, run, snap: () => effectSnapshot(t.db, c.operationId, c.taskId) };
}

describe('ledger-only steps in one transaction', () => {
  it('exactly the ledger-only kinds offer their effect inside the claim', () => {
    const offered = STEP_KINDS.filter((k) => (defaultStepHandlers[k] as StepHandler).applyInClaim !== undefined);
    expect(offered.sort()).toEqual([...LEDGER_ONLY_KINDS].sort());
  });

  it('claims (generation and attempt raised), performs and records with hashed, valid evidence', async () => {
    const s = await setup();
    for (const kind of ['workspace_attachment', 'session_prepare', 'launch_intent'] as const) {
      const { claim, outcome } = await s.run(kind);
      expect(outcome.state).toBe(kind === 'launch_intent' ? 'armed' : 'succeeded');
      await expectRecordedInOneClaim(t.db, claim, outcome);
    }
  });

  it('a failure before COMMIT leaves nothing, not even the claim; the next run succeeds once', async () => {
    const s = await setup();
    const before = await s.snap();
    armFailpoint('before_ledger_step_commit', { kind: 'throw' }, { times: 1 });
    try {
      await expect(s.run('workspace_attachment')).rejects.toBeInstanceOf(FailpointError);
    } finally {
      disarmAll();
    }
    expect(await s.snap()).toBe(before);
    const { outcome } = await s.run('workspace_attachment');
    expect(outcome.state).toBe('succeeded');
    // A duplicate wake-up finds the step finished: a typed conflict and nothing written.
    const done = await s.snap();
    await expectTyped(s.run('workspace_attachment', 'w2'), 'creation_state_conflict');
    expect(await s.snap()).toBe(done);
  });

  it('a launch intent before every other step succeeded is refused with nothing written', async () => {
    const s = await setup();
    await s.run('workspace_attachment');
    const before = await s.snap();
    await expectTyped(s.run('launch_intent'), 'creation_state_conflict');
    expect(await s.snap()).toBe(before);
  });
});
