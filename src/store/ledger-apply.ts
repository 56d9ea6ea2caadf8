/**
 * The two functions a ledger-only step kind gives the one-transaction claim
 * (store/ledger-step.ts): its apply and the locks that apply will take; and
 * the record of a performed effect that a batch may open with (`HeldRecord`,
 * ADR 0041). Types only, so the kinds' contract (src/kinds/contract.ts) can
 * name them without importing the batch.
 */
import type { Statement, Tx } from '../db/tx';
import type { EffectOutcome } from './effects/recording';
import type { LockNeed } from './effects/row-locks';
import type { ClaimContext } from './claimed';
import type { StepClaim, StepRow } from './types';

/** A kind's effect and record inside the claim's transaction (exported by each ledger kind's effect module). */
export type LedgerApply = (tx: Tx, claim: StepClaim, claimed?: ClaimContext) => Promise<EffectOutcome>;

/** The rows above tier 7 a kind's `LedgerApply` will lock, read from the step row before any is locked. */
export type LedgerLocks = (tx: Tx, step: StepRow) => Promise<LockNeed[]>;

/**
 * The plain reads a kind's `LedgerApply` makes first, from the step row alone: a batch sends them early, right after
 * its locks (ADR 0026), for a step that follows another. A read that an earlier step's write may change is dropped
 * and sent again, as is one that does not match what apply then issues.
 */
export type LedgerReads = (step: StepRow) => Statement[];

/**
 * A performed effect's record, run in the transaction that goes on with the operation (ADR 0041): `locks` are the
 * rows above tier 7 it locks (taken with that transaction's up-front union, in global order; with `reads`, they read
 * the rows `record` reads next); `record` runs under them, with the claim's context, and records through the claim's
 * compare-and-set (`recordSuccessLocked` / `failWithRowsLocked`). The kind's own record transaction is the same
 * `record` after its own locks.
 */
export interface HeldRecord {
  /** The kind's record transaction's name (`RecordFreshBranch`), for that transaction alone. */
  readonly name: string;
  readonly locks: LockNeed[];
  record(tx: Tx, ctx: ClaimContext): Promise<EffectOutcome>;
}

/**
 * Records a performed effect (`HeldRecord`) for a live claim: in the ledger batch that then arms the launch intent
 * and runs Complete's phase A when the step worker runs the operation's next steps itself, else in a transaction of
 * its own. Resolves to the recorded outcome; rejects as the kind's own record would (stale claim, database down).
 */
export type RecordHeld = (held: HeldRecord) => Promise<EffectOutcome>;

/**
 * A kind's ownership marker, written in the ledger batch that claims its step with itself (ADR 0040): `locks` (above
 * tier 7) join the batch's up-front union; `read`, issued right after those locks and before the batch writes
 * anything, reads what the write needs (answered by the locks' reads) and returns the write, run under the locks
 * right after the step's claim. A batch that claims no such step never runs the write.
 */
export interface MarkerWithClaim {
  locks(step: StepRow): LockNeed[];
  read(tx: Tx, step: StepRow): (claim: StepClaim) => Promise<void>;
}
