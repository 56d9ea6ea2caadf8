/**
 * confirmLaunchDispatchClaim — the check right before an agent is started
 * that its dispatch claim is still live: `running`, of this generation and
 * owner, not fenced by a deletion, its lease not run out. A stale claim
 * (expired, recovered, retried by a later generation, fenced by a deletion)
 * performs no I/O.
 *
 * It touches the dispatch claim 8.2 alone, outside any transaction, in one
 * round trip in the common case (ADR 0031):
 * - a plain read answers "live" when the claim is live with at least nine
 *   tenths of its lease still ahead by the database's clock — the usual case,
 *   the claim having been taken (by the launch's own claim or phase B, ADR
 *   0019) milliseconds before. Nothing is written: the start and its record
 *   have nearly a whole lease after the check, as after a renewal.
 * - otherwise the compare-and-set that renews the lease of a live claim
 *   (one autocommit statement, `execIdempotent`: renewing a live lease by
 *   its own owner twice is renewing it once) decides, as it always did.
 * Both read the committed row and compare with the database's clock, so a
 * deletion or a recovery committed before the check is seen by either. A
 * deletion still in flight (its transaction holds the claim's row) is not
 * waited for by the read, as the renewal waited for it: the agent then
 * starts as if the deletion had come right after the check — its record is
 * refused and the deletion's cleanup job stops the agent.
 */
import type { DispatchClaim } from './types';
import { execIdempotent, readRows, type Db } from '../db/tx';
import { nowPlusMsSql, nowSql } from '../db/dialect';

const LIVE = `state = 'running' AND generation = ? AND lease_owner = ? AND deletion_operation_id IS NULL`;

/** Of its lease, what must be left for the read to answer alone (the rest of it: the time since the claim). */
const FRESH = 0.9;

/** True when the claim is live (renewed unless nine tenths of its lease were left); false when it is stale. */
export async function confirmLaunchDispatchClaim(db: Db, claim: DispatchClaim, leaseMs: number): Promise<boolean> {
  const fresh = await readRows(
    db,
    `SELECT 1 AS live FROM task_launch_dispatch_claims
      WHERE id = ? AND ${LIVE} AND lease_expires_at > ${nowPlusMsSql(db.dialect)}`,
    [claim.dispatchId, claim.generation, claim.owner, Math.floor(leaseMs * FRESH)],
  );
  if (fresh.length === 1) return true;
  const changed = await execIdempotent(
    db,
    `UPDATE task_launch_dispatch_claims SET lease_expires_at = ${nowPlusMsSql(db.dialect)}, updated_at = ${nowSql(db.dialect)}
      WHERE id = ? AND ${LIVE} AND lease_expires_at > ${nowSql(db.dialect)}`,
    [leaseMs, claim.dispatchId, claim.generation, claim.owner],
  );
  return changed === 1;
}
