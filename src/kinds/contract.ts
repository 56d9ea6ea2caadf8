/**
 * The contract every step kind implements (one file per kind under
 * `src/steps/`). Handlers perform no untracked effect: they run only with a
 * live StepClaim, do their I/O outside any SQL transaction with the step's
 * idempotency key / ownership marker, and record the result only through
 * Store methods (compare-and-set on the claim).
 */
import type { StepEvidence } from '../canonical/types';
import type { Db } from '../db/tx';
import type { StepKind, StepState } from '../domain/vocab';
import type { Logger } from '../log';
import type { ProviderRegistry } from '../providers/types';
import type { LedgerApply } from '../store/ledger-step';
import type { OperationAuthority, StepClaim, StepRow } from '../store/types';

export interface EffectDeps {
  db: Db;
  /** Absolute: worktrees, staged and claimed attachments live under it. */
  dataDir: string;
  providers: ProviderRegistry;
  log: Logger;
  /** Provider/Git call timeout. */
  timeoutMs: number;
}

/**
 * What observing the real world found for one step (used by recovery):
 * `present_exact` and `absent_proven` are proof (the step resolves);
 * `conflict` is a proven contradiction (a foreign or changed effect: an
 * operator's); `unobservable` means the world could not be read (a provider
 * down or refusing our credentials, Git or the file system failing): nothing
 * is proven either way, and recovery looks again later, with backoff.
 * `conflict` and `unobservable` carry `conflict` evidence naming the reason.
 */
export interface Observation {
  effect: 'present_exact' | 'absent_proven' | 'conflict' | 'unobservable';
  evidence: StepEvidence;
}

export interface StepHandler<K extends StepKind = StepKind> {
  readonly kind: K;
  /**
   * Performs the effect for a live claim and records the outcome through the
   * Store (succeeded / armed, or failed / retry_wait / unknown with evidence).
   * Returns the state it recorded. Throws only when it could not record at
   * all (database down, stale claim): the lease then expires and the reaper
   * turns the step `unknown`. `heartbeat` renews the lease during long I/O.
   */
  perform(deps: EffectDeps, claim: StepClaim, heartbeat: () => Promise<void>): Promise<StepState>;
  /**
   * Only for a kind whose effect lives only in the ledger database: its effect
   * and record inside the claim's own transaction. The step worker then claims,
   * performs and records in one transaction (store/ledger-step.ts) instead of
   * a claim commit followed by `perform`.
   */
  readonly applyInClaim?: LedgerApply;
  /** Observes the effect of an existing step without changing anything. */
  observe(deps: EffectDeps, step: StepRow): Promise<Observation>;
  /**
   * Optional, for recovery of an `unknown` step, before it observes: removes
   * what a worker that died before its record provably made (proven by the
   * step's ownership marker) and that no recorded effect owns, so that the
   * observation can prove the effect absent. Idempotent; does nothing
   * without that proof. Runs under the operation's recovery claim (`auth`).
   */
  removeUnrecorded?(deps: EffectDeps, step: StepRow, auth: OperationAuthority): Promise<void>;
}
