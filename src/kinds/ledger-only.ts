/**
 * The step handler of a kind whose effect lives only in the ledger database
 * (`workspace_attachment`, `session_prepare`, `launch_intent`): its effect
 * and record are one Store transaction, so there is no lost-ack window.
 * `perform` passes the `after_effect_before_record` failpoint just before that
 * transaction (a crash there leaves a claimed step with no effect: observed
 * absent, retried) and returns the state it recorded; `applyInClaim` and
 * `applyLocks` let the step worker claim, perform and record it — with its
 * runnable siblings — in one transaction (store/ledger-step.ts).
 */
import type { Db } from '../db/tx';
import type { StepKind } from '../domain/vocab';
import { failpoint } from '../failpoints';
import type { EffectOutcome } from '../store/effects/recording';
import type { LedgerApply, LedgerLocks, LedgerReads } from '../store/ledger-apply';
import type { StepClaim, StepRow } from '../store/types';
import type { Observation, StepHandler } from './contract';

export interface LedgerOnlyKind<K extends StepKind> {
  kind: K;
  /** The kind's one-transaction Store method: effect and record. */
  apply: (db: Db, claim: StepClaim) => Promise<EffectOutcome>;
  applyInClaim: LedgerApply;
  applyLocks: LedgerLocks;
  /** Optional: what apply reads first, for a batch to send early (ADR 0026). */
  applyReads?: LedgerReads;
  observe: (db: Db, step: StepRow) => Promise<Observation>;
}

export function ledgerOnlyHandler<K extends StepKind>(k: LedgerOnlyKind<K>): StepHandler<K> {
  return {
    kind: k.kind,
    applyInClaim: k.applyInClaim,
    applyLocks: k.applyLocks,
    applyReads: k.applyReads,
    async perform(deps, claim) {
      await failpoint('after_effect_before_record', {
        kind: claim.kind,
        operationId: claim.operationId,
        stepId: claim.stepId,
      });
      return (await k.apply(deps.db, claim)).state;
    },
    observe: (deps, step) => k.observe(deps.db, step),
  };
}
