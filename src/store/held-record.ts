/**
 * RecordHeld (alone): a performed effect's record (`HeldRecord`) in a
 * transaction of its own, for a live claim — the kind's record transaction
 * when no ledger batch takes it (store/ledger-step.ts
 * `recordAndApplyLedgerSteps`, ADR 0041).
 *
 * Locks: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`), then the record's own (`held.locks`, above tier 7,
 * in global order), which travel with the record's first reads. Writes what
 * the record writes (its rows, the step's `running -> succeeded` or failure
 * by the claim's compare-and-set); a stale claim writes nothing. No event.
 */
import { runTransaction, type Db } from '../db/tx';
import { lockClaimedLocked } from './claimed';
import type { EffectOutcome } from './effects/recording';
import { EFFECT_ROW_UNIQUES, takeLocks } from './effects/row-locks';
import type { HeldRecord } from './ledger-apply';
import type { StepClaim } from './types';

export async function recordHeldAlone(db: Db, claim: StepClaim, held: HeldRecord): Promise<EffectOutcome> {
  return runTransaction(
    db,
    held.name,
    async (tx) => {
      const ctx = await lockClaimedLocked(tx, claim);
      // Issued, not awaited: the record's first reads follow the locks in the same round trip (ADR 0040).
      const locked = takeLocks(tx, held.locks);
      const [outcome] = await Promise.all([held.record(tx, ctx), locked]);
      return outcome;
    },
    { restartOnUnique: EFFECT_ROW_UNIQUES },
  );
}
