/**
 * The check right before an agent's start (store/launch-confirm.ts, ADR 0031)
 * against the real database, both dialects: a claim taken moments ago is
 * confirmed by one plain read, nothing written; one with less than nine
 * tenths of its lease left is renewed by the compare-and-set; a claim that is
 * stale in any way — recovered, fenced by a deletion, of another generation
 * or owner, its lease run out, gone — is refused, and nothing is written.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { DispatchClaim } from '../../src/store/launch-dispatch';
import { confirmLaunchDispatchClaim } from '../../src/store/launch-confirm';
import { sql, useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { claimedLaunch } from '../support/launch';

const t = useTestDb();
const OWNER = 'confirm-test:worker';
const LEASE_MS = 60_000;

afterEach(() => {
  vi.restoreAllMocks();
});

const claimed = async (): Promise<DispatchClaim> => (await claimedLaunch(t.db, OWNER, LEASE_MS)).claim;

/** The claim row's lease as milliseconds from the database's now (negative: run out), and its last write. */
async function leaseOf(
  claim: DispatchClaim,
): Promise<{ leftMs: number; lease: string; updatedAt: string; state: string }> {
  const left =
    t.db.dialect === 'postgres'
      ? 'EXTRACT(EPOCH FROM (lease_expires_at - clock_timestamp())) * 1000'
      : 'TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), lease_expires_at) / 1000';
  const [row] = await sql<{ left_ms: string | number | null; lease: unknown; updated_at: unknown; state: string }>(
    t.db,
    `SELECT ${left} AS left_ms, lease_expires_at AS lease, updated_at, state FROM task_launch_dispatch_claims WHERE id = ?`,
    [claim.dispatchId],
  );
  const exact = (v: unknown) => (v instanceof Date ? v.toISOString() : String(v));
  return {
    leftMs: Number(row!.left_ms),
    lease: exact(row!.lease),
    updatedAt: exact(row!.updated_at),
    state: row!.state,
  };
}

/** Moves the claim's lease to `ms` from the database's now (negative: already run out). */
async function setLease(claim: DispatchClaim, ms: number): Promise<void> {
  const at =
    t.db.dialect === 'postgres'
      ? `clock_timestamp() + (CAST(? AS integer) * interval '1 millisecond')`
      : 'UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND';
  await sql(t.db, `UPDATE task_launch_dispatch_claims SET lease_expires_at = ${at} WHERE id = ?`, [
    ms,
    claim.dispatchId,
  ]);
}

describe('confirmLaunchDispatchClaim', () => {
  it('confirms a claim taken moments ago with one plain read, writing nothing', async () => {
    const claim = await claimed();
    const before = await leaseOf(claim);
    const trips = countRoundTrips(t.db, claim.dispatchId);
    expect(await confirmLaunchDispatchClaim(t.db, claim, LEASE_MS)).toBe(true);
    // The renewal would be a second round trip (and move the lease).
    expect(trips.calls).toBe(1);
    const after = await leaseOf(claim);
    expect([after.lease, after.updatedAt, after.state]).toEqual([before.lease, before.updatedAt, 'running']);
  });

  it('renews a live claim with less than nine tenths of its lease left', async () => {
    const claim = await claimed();
    await setLease(claim, 50_000);
    expect(await confirmLaunchDispatchClaim(t.db, claim, LEASE_MS)).toBe(true);
    const after = await leaseOf(claim);
    expect(after.leftMs).toBeGreaterThan(55_000);
    expect(after.leftMs).toBeLessThanOrEqual(LEASE_MS);
  });

  it('refuses a claim whose lease ran out, and renews nothing', async () => {
    const claim = await claimed();
    await setLease(claim, -1_000);
    expect(await confirmLaunchDispatchClaim(t.db, claim, LEASE_MS)).toBe(false);
    expect((await leaseOf(claim)).leftMs).toBeLessThan(0);
  });

  it('refuses a claim recovered, fenced by a deletion, of another generation or owner, or gone; writing nothing', async () => {
    const claim = await claimed();
    const refusedUnchanged = async (c: DispatchClaim, state: string) => {
      const before = await leaseOf(claim);
      expect(await confirmLaunchDispatchClaim(t.db, c, LEASE_MS)).toBe(false);
      const after = await leaseOf(claim);
      expect([after.lease, after.updatedAt, after.state]).toEqual([before.lease, before.updatedAt, state]);
    };
    await refusedUnchanged({ ...claim, generation: claim.generation + 1 }, 'running');
    await refusedUnchanged({ ...claim, owner: 'someone-else' }, 'running');
    await refusedUnchanged({ ...claim, dispatchId: claim.sessionId }, 'running');

    await sql(t.db, 'UPDATE task_launch_dispatch_claims SET deletion_operation_id = ? WHERE id = ?', [
      claim.operationId,
      claim.dispatchId,
    ]);
    await refusedUnchanged(claim, 'running');

    await sql(
      t.db,
      "UPDATE task_launch_dispatch_claims SET deletion_operation_id = NULL, state = 'unknown' WHERE id = ?",
      [claim.dispatchId],
    );
    await refusedUnchanged(claim, 'unknown');
  });
});
