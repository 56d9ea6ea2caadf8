/**
 * The step-kind contract: one folder per kind under `src/kinds/<kind>/`
 * holds everything about that kind, and its `index.ts` exports one
 * `StepKindModule` that `src/kinds/registry.ts` lists (one line per kind).
 * The step worker and the reaper drive `perform` / `applyInClaim` /
 * `observe` / `removeUnrecorded`; Complete drives `verifier`; compensation
 * drives `undo`; the cleanup worker drives `cleanup`; `taskledger verify`
 * drives `observe` and `verifyPass`.
 *
 * Handlers perform no untracked effect: they run only with a live StepClaim,
 * do their I/O outside any SQL transaction with the step's idempotency key /
 * ownership marker, and record the result only through Store methods
 * (compare-and-set on the claim). The kind's request and present-observation
 * schemas live in `src/canonical/schemas/` (the canonical layer sits below
 * every kind: the Store validates with them at Begin and at each record).
 */
import type { StepEvidence } from '../canonical/types';
import type { Db } from '../db/tx';
import type { StepKind, StepState } from '../domain/vocab';
import type { Logger } from '../log';
import type { ProviderRegistry } from '../providers/types';
import type { LedgerApply, LedgerLocks, LedgerReads, MarkerWithClaim, RecordHeld } from '../store/ledger-apply';
import type { OperationAuthority, StepClaim, StepRow } from '../store/types';
import type { CleanupJobClaim } from '../store/cleanup-jobs';
import type { LockNeed } from '../store/effects/row-locks';
import type { Tx } from '../db/tx';
import type { SettledCompensation } from '../store/compensation';
import type { CompensationClaim } from '../store/types';
import type { CleanupProof } from '../compensation/cleanup-proof';
import type { CleanupDecision } from '../cleanup/decision';
import type { Drift } from '../verify/drift';

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

/** A kind's ownership marker written with its claim (`StepHandler.markerWithClaim`). */
export type { MarkerWithClaim };

export interface StepHandler<K extends StepKind = StepKind> {
  readonly kind: K;
  /**
   * Performs the effect for a live claim and records the outcome through the
   * Store (succeeded / armed, or failed / retry_wait / unknown with evidence).
   * Returns the state it recorded. Throws only when it could not record at
   * all (database down, stale claim): the lease then expires and the reaper
   * turns the step `unknown`. `heartbeat` keeps the lease live during long
   * I/O: on return at least three quarters of the lease are left (it renews
   * unless the claim or the last renewal is that recent,
   * src/coordinator/lease-keeper.ts), and it rejects once the claim is stale.
   * `record`, when the worker offers it, takes the kind's record of a performed effect (`HeldRecord`: its locks
   * and its work under them) into the ledger batch that goes on with the operation (ADR 0041); a kind may use it
   * for its success record instead of its own record transaction.
   */
  perform(deps: EffectDeps, claim: StepClaim, heartbeat: () => Promise<void>, record?: RecordHeld): Promise<StepState>;
  /**
   * Only for a kind whose effect lives only in the ledger database: its effect
   * and record inside the claim's own transaction. The step worker then claims,
   * performs and records in one transaction (store/ledger-step.ts) instead of
   * a claim commit followed by `perform`.
   */
  readonly applyInClaim?: LedgerApply;
  /**
   * With `applyInClaim`: the rows (above tier 7) that apply will lock, read
   * from the step row before any of them is locked, so that one transaction
   * can claim and apply several of an operation's ledger-only steps after
   * taking all their locks in one global order (store/ledger-step.ts).
   */
  readonly applyLocks?: LedgerLocks;
  /**
   * With `applyInClaim`: the plain reads it makes first, from the step row alone, which a batch sends early, after
   * its locks, for a step that follows another in it (ADR 0026).
   */
  readonly applyReads?: LedgerReads;
  /**
   * Without `applyInClaim`: the ownership marker a kind persists before its first mutation, written in the ledger
   * batch that claims the step with itself (ADR 0040): `locks` (above tier 7) join the batch's up-front lock union,
   * `read` is issued right after them and its write runs right after the claim. `perform` then finds the marker in
   * place (and the facts `read` read, ADR 0041) and skips the
   * transaction that would write it; a marker it could not place (a foreign one) is left to that transaction.
   */
  readonly markerWithClaim?: MarkerWithClaim;
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

/**
 * Compensation's undo of one step (src/compensation/run.ts claims, the undo
 * records). It runs only with a live CompensationClaim, observes the real
 * effect first, does its I/O (Git, provider, files) outside any SQL
 * transaction, acts only on exact ownership proof (marker, ownership hash,
 * row hash), and records the result only through the Store
 * (`settleTaskCreationCompensation` / `completeTaskCreationCompensation`,
 * compare-and-set on the claim). It is idempotent: run again after a crash
 * (compensation `unknown`, src/compensation/reconcile.ts) it finds what is
 * already undone and finishes the rest.
 */
export type CompensationUndo = (deps: EffectDeps, claim: CompensationClaim) => Promise<SettledCompensation>;

/**
 * The cleanup worker's performer for a transferred effect of this kind
 * (src/cleanup/worker.ts has verified the proof's hash and binding): acts
 * outside any transaction on the proof and what it re-observes, and says
 * what FinishCleanupJob then does (undo the proof's rows, retry, unknown).
 */
export type CleanupPerformer = (
  deps: EffectDeps,
  job: CleanupJobClaim,
  proof: CleanupProof,
) => Promise<CleanupDecision>;

/** A kind's own ledger-wide look at the world for `taskledger verify --observe` (reads only). */
export type VerifyPass = (
  deps: { db: Db; dataDir: string },
  options: { workspaceId?: string; limit: number },
) => Promise<Drift[]>;

/**
 * Complete's byte-equivalence of one kind's effect rows: re-derives the
 * step's rows from its stored request and owner, re-reads them and throws
 * `ConflictError('evidence_mismatch')` if any row or hash in the evidence
 * differs. Runs under Complete's locks (1..7) after the Complete predicate.
 */
export interface EffectVerifier {
  /** Rows above tier 7 the verifier reads; taken for all steps at once, in global order. */
  locks?: (step: StepRow, evidence: StepEvidence) => LockNeed[];
  verify: (tx: Tx, step: StepRow, evidence: StepEvidence) => Promise<void>;
}

export interface StepKindModule<K extends StepKind = StepKind> extends StepHandler<K> {
  /** Complete's byte-equivalence of this kind's effect rows (store/effects/verify.ts). */
  readonly verifier: EffectVerifier;
  /** null: the kind is never compensated (a launch intent, V7). */
  readonly undo: CompensationUndo | null;
  /** null: compensation never transfers this kind to a cleanup job. */
  readonly cleanup: CleanupPerformer | null;
  readonly verifyPass?: VerifyPass;
}
