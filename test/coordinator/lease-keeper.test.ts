/**
 * The heartbeat of a step's effect (src/coordinator/lease-keeper.ts): within a
 * quarter lease of the claim or of the last renewal it renews nothing (the
 * lease is live with three quarters left); after that it renews the lease in
 * the ledger; once a renewal failed (a stale claim) every later heartbeat
 * rejects. A clock the test sets; the real database. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { leaseKeeper } from '../../src/coordinator/lease-keeper';
import { claimTaskCreationStep, renewTaskCreationStepLease } from '../../src/store/step-claims';
import { sql, useTestDb } from '../support/db';
import { begin, expectTyped } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();
const LEASE_MS = 60_000;

async function claimed() {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { workspace_policy: { mode: 'shared_group', group_id: ws.groupId } });
  const [step] = await sql<{ kind: string; step_key: string }>(
    t.db,
    "SELECT kind, step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'workspace_attachment'",
    [res.operationId],
  );
  const auth = { kind: 'handle' as const, handle: res.handle! };
  const ref = { kind: step!.kind as never, stepKey: step!.step_key };
  const claim = await claimTaskCreationStep(t.db, auth, ref, 'w1', LEASE_MS);
  const expiry = async () => {
    const [row] = await sql<{ lease_expires_at: Date }>(
      t.db,
      'SELECT lease_expires_at FROM task_creation_steps WHERE id = ?',
      [claim.stepId],
    );
    return new Date(row!.lease_expires_at).getTime();
  };
  return { claim, expiry };
}

describe('the lease keeper of a running step', () => {
  it('renews nothing within a quarter lease of the claim or of the last renewal, and renews after it', async () => {
    const { claim, expiry } = await claimed();
    let clock = 1_000_000;
    let renewals = 0;
    const keeper = leaseKeeper(
      () => {
        renewals++;
        return renewTaskCreationStepLease(t.db, claim, LEASE_MS);
      },
      LEASE_MS,
      clock,
      () => clock,
    );
    const claimedExpiry = await expiry();
    clock += LEASE_MS / 4 - 1;
    await keeper.heartbeat();
    expect(renewals).toBe(0);
    expect(await expiry()).toBe(claimedExpiry);

    clock += 1;
    await keeper.heartbeat();
    expect(renewals).toBe(1);
    const renewedExpiry = await expiry();
    expect(renewedExpiry).toBeGreaterThan(claimedExpiry);

    // Timed from the renewal now: the next quarter lease renews nothing again.
    clock += LEASE_MS / 8;
    await keeper.heartbeat();
    expect(renewals).toBe(1);
    expect(await expiry()).toBe(renewedExpiry);

    // The periodic renewal always renews.
    await keeper.renew();
    expect(renewals).toBe(2);
  });

  it('rejects every heartbeat once a renewal failed, also within the quarter lease', async () => {
    const { claim } = await claimed();
    let clock = 5_000_000;
    const keeper = leaseKeeper(
      () => renewTaskCreationStepLease(t.db, claim, LEASE_MS),
      LEASE_MS,
      clock,
      () => clock,
    );
    // Another attempt's generation: this claim is stale.
    await sql(t.db, 'UPDATE task_creation_steps SET generation = generation + 1 WHERE id = ?', [claim.stepId]);
    clock += LEASE_MS / 2;
    await expectTyped(keeper.heartbeat(), 'stale_claim');
    await expect(keeper.heartbeat()).rejects.toThrow('lease lost');
    await expect(keeper.renew()).rejects.toThrow('lease lost');
  });
});
