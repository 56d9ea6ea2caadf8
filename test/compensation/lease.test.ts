/**
 * A running compensation's lease: renewed by its runner's heartbeat, so an
 * undo that takes longer than the lease still records; a renewal on a stale
 * or expired claim changes nothing and says `stale_claim`. Both dialects.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { armFailpoint, disarmAll, failpointHits } from '../../src/failpoints';
import { claimTaskCreationCompensation } from '../../src/store/compensation';
import { renewTaskCreationCompensationLease } from '../../src/store/compensation-lease';
import { sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import { compensation, failedCreation, recovery, seeded, useFakeProvider } from './support';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 700;
afterEach(() => disarmAll());

const leaseOf = async (stepId: string) => {
  const [row] = await sql<{ at: Date | null; live: number | boolean }>(
    t.db,
    `SELECT compensation_lease_expires_at AS at, CASE WHEN compensation_lease_expires_at > ${t.db.dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)'} THEN 1 ELSE 0 END AS live FROM task_creation_steps WHERE id = ?`,
    [stepId],
  );
  return { at: row!.at === null ? null : new Date(row!.at), live: Number(row!.live) === 1 };
};

describe('compensation lease', () => {
  it('renewal extends a live claim; a stale or expired one is refused with zero writes', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    const ref = { kind: 'session_prepare' as const, stepKey: c.step('session_prepare').step_key };
    const claim = await claimTaskCreationCompensation(t.db, recovery(c.operationId), ref, 'runner-1', 2_000);
    const before = await leaseOf(claim.stepId);
    await renewTaskCreationCompensationLease(t.db, claim, 60_000);
    const after = await leaseOf(claim.stepId);
    expect(after.at!.getTime() - before.at!.getTime()).toBeGreaterThan(50_000);

    await expectTyped(
      renewTaskCreationCompensationLease(t.db, { ...claim, compensationGeneration: claim.compensationGeneration - 1 }),
      'stale_claim',
    );
    await expectTyped(renewTaskCreationCompensationLease(t.db, { ...claim, owner: 'someone-else' }), 'stale_claim');
    const past = t.db.dialect === 'postgres' ? "now() - interval '1 second'" : 'NOW(3) - INTERVAL 1 SECOND';
    await sql(t.db, `UPDATE task_creation_steps SET compensation_lease_expires_at = ${past} WHERE id = ?`, [
      claim.stepId,
    ]);
    const expired = await leaseOf(claim.stepId);
    await expectTyped(renewTaskCreationCompensationLease(t.db, claim), 'stale_claim');
    expect(await leaseOf(claim.stepId)).toEqual(expired);
  });

  it('an undo that outlasts its lease keeps the claim alive through the heartbeat and records', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['session_prepare'], 'attachment_claim', pr);
    const stepId = c.step('session_prepare').id;
    const seen: boolean[] = [];
    armFailpoint('during_compensation', {
      kind: 'call',
      fn: async () => {
        // Three lease lengths pass inside the undo; the lease must be live at every look. The lease (2.4 s,
        // renewed every 800 ms) leaves a loaded machine 1.6 s of stall before a look could see it lapse.
        for (let i = 0; i < 6; i++) {
          await new Promise((r) => setTimeout(r, 1_200));
          seen.push((await leaseOf(stepId)).live);
        }
      },
    });
    const report = await runPendingCompensations(c.deps, c.operationId, 'slow-runner', 2_400);
    expect(failpointHits('during_compensation')).toBe(1);
    expect(seen).toEqual([true, true, true, true, true, true]);
    expect(report).toEqual({ compensated: 1, transferred: 0, retry: 0, unknown: 0 });
    expect((await compensation(t.db, stepId)).state).toBe('compensated');
  });
});
