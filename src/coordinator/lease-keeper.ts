/**
 * The heartbeat a step's effect calls while it runs outside any transaction
 * (src/kinds/contract.ts: `perform(deps, claim, heartbeat)`).
 *
 * Contract: `heartbeat()` renews the claim's lease (one transaction,
 * `renewTaskCreationStepLease`) and rejects once a renewal failed (the claim
 * is stale or the lease is gone: the effect must stop). A call within a
 * quarter of the lease of the claim or of the last renewal — each timed from
 * before its statement was sent, so the database's expiry is at least that
 * time plus the lease — renews nothing: the lease then has at least three
 * quarters of its length left, more than any command the effect runs next
 * may take (each command's timeout is at most half the lease), and a live
 * lease already fences every later attempt of the step (only an expired
 * lease lets the reaper turn the step `unknown` and another attempt claim
 * it). The worker's periodic renewal (every third of the lease) always
 * renews.
 *
 * Why: the Git step called three heartbeats within milliseconds of its claim
 * (before its marker, before Git, before its record), each a transaction of
 * its own that changed nothing a quarter-lease check does not already prove.
 */
export interface LeaseKeeper {
  /** Renews unless renewed (or claimed) within the last quarter lease; rejects once a renewal failed. */
  heartbeat(): Promise<void>;
  /** Renews now (the periodic timer). */
  renew(): Promise<void>;
}

export function leaseKeeper(
  renewLease: () => Promise<unknown>,
  leaseMs: number,
  /** When the claim's statement was sent (the lease runs from no earlier than this). */
  claimedAt: number,
  now: () => number = Date.now,
): LeaseKeeper {
  let lost = false;
  let renewedFrom = claimedAt;
  const renew = async (): Promise<void> => {
    if (lost) throw new Error('lease lost');
    const sent = now();
    try {
      await renewLease();
    } catch (err) {
      lost = true;
      throw err;
    }
    renewedFrom = Math.max(renewedFrom, sent);
  };
  return {
    renew,
    heartbeat: async () => {
      if (lost) throw new Error('lease lost');
      if (now() - renewedFrom < leaseMs / 4) return;
      await renew();
    },
  };
}
