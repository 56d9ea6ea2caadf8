/**
 * The two functions a ledger-only step kind gives the one-transaction claim
 * (store/ledger-step.ts): its apply and the locks that apply will take. Types
 * only, so the kinds' contract (src/kinds/contract.ts) can name them without
 * importing the batch.
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
