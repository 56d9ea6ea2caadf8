/**
 * ClaimAndApplyLedgerStep: a step whose effect lives only in the ledger
 * database — `workspace_attachment`, `session_prepare`, `launch_intent` — is
 * claimed, performed and recorded in ONE transaction (issue 14's ruling,
 * docs/adr/0011-ledger-steps-in-one-transaction.md).
 *
 * Nothing the protocol proves is given up: the claim's compare-and-set still
 * raises the generation and attempt and sets a lease (so a concurrent claim
 * or a stale duplicate job conflicts exactly as before); the kind's apply
 * still locks its rows, writes them and records `succeeded` / `armed` (or
 * `failed` / `unknown`) with canonical, hashed evidence through the same
 * compare-and-set from `running`; the lock order is the claim's tiers 1–7
 * and then the kind's own tiers, ascending (re-acquiring a held key is a
 * no-op in the LockPlan). What disappears is the window between two commits:
 * a crash before COMMIT leaves the step exactly as it was (planned or
 * retry_wait, same generation) — no lease to expire, nothing `unknown`,
 * nothing to reconcile — and a commit means claim and effect both happened.
 *
 * Locks: workspace 1, (authority 1.5), operation 4.2, task 5.2, identity 6,
 * steps 7 (the claim), then the kind's (9–14). Conflicts of the claim
 * (`stale_claim`, `creation_state_conflict`, `workspace_deleting`,
 * `not_found`) or of the effect write nothing. No event.
 */
import { runTransaction, type Db, type Tx } from '../db/tx';
import { failpoint } from '../failpoints';
import type { EffectOutcome } from './effects/recording';
import { EFFECT_ROW_UNIQUES } from './effects/row-locks';
import type { ClaimContext } from './claimed';
import { claimStepInContextLocked } from './step-claims';
import type { StepRef } from './step-rows';
import type { OperationAuthority, StepClaim } from './types';

/** A kind's effect and record inside the claim's transaction (exported by each ledger kind's effect module). */
export type LedgerApply = (tx: Tx, claim: StepClaim, claimed?: ClaimContext) => Promise<EffectOutcome>;

export interface LedgerStepResult {
  claim: StepClaim;
  outcome: EffectOutcome;
}

export async function claimAndApplyLedgerStep(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number,
  apply: LedgerApply,
): Promise<LedgerStepResult> {
  return runTransaction(
    db,
    'ClaimAndApplyLedgerStep',
    async (tx) => {
      const { claim, ctx } = await claimStepInContextLocked(tx, auth, ref, owner, leaseMs);
      const outcome = await apply(tx, claim, ctx);
      await failpoint('before_ledger_step_commit', {
        kind: claim.kind,
        operationId: claim.operationId,
        stepId: claim.stepId,
      });
      return { claim, outcome };
    },
    { restartOnUnique: EFFECT_ROW_UNIQUES },
  );
}
