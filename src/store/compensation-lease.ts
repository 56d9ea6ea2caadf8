/**
 * RenewTaskCreationCompensationLease: the heartbeat of a running
 * compensation. Locks only the step row (tier 7). Extends the lease of a live
 * claim (running, same compensation generation and owner, lease not yet
 * expired by the database clock); anything else changes nothing and gets
 * `stale_claim` — an expired lease belongs to the reaper, which turns it
 * `unknown`.
 */
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { DEFAULT_LEASE_MS } from './step-claims';
import type { CompensationClaim } from './types';

export async function renewTaskCreationCompensationLease(
  db: Db,
  claim: CompensationClaim,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<void> {
  await runTransaction(db, 'RenewTaskCreationCompensationLease', async (tx) => {
    tx.lockRow(TIER.STEP, 'task_creation_steps', claim.stepId);
    const changed = await tx.exec(
      `UPDATE task_creation_steps SET compensation_lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
        WHERE id = ? AND compensation_state = 'running' AND compensation_generation = ? AND compensation_lease_owner = ?
          AND compensation_lease_expires_at > ${tx.now}`,
      [leaseMs, claim.stepId, claim.compensationGeneration, claim.owner],
    );
    if (changed !== 1) {
      throw new ConflictError('stale_claim', 'compensation lease is no longer held by this claim', {
        step_id: claim.stepId,
      });
    }
  });
}
