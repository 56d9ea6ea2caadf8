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
 * The claim's and the record's compare-and-sets travel with the statements
 * after them (`Tx.expect`, checked before COMMIT): under the step-row locks
 * their outcome is already settled, and a wrong count still rolls the whole
 * transaction back with `stale_claim`. Such a claim's lease is not read back.
 *
 * Locks: workspace 1, (authority 1.5), operation 4.2, task 5.2, identity 6,
 * steps 7 (the claim), then the kind's (9–14). Conflicts of the claim
 * (`stale_claim`, `creation_state_conflict`, `workspace_deleting`,
 * `not_found`) or of the effect write nothing. No event.
 */
import { evidenceBytesOf } from './evidence-memo';
import { runTransaction, type Db, type Tx } from '../db/tx';
import type { Statement } from '../db/batch';
import type { CreationPlan } from '../canonical/types';
import { isTaskLedgerError } from '../domain/errors';
import { LEDGER_ONLY_KINDS, type StepKind } from '../domain/vocab';
import { failpoint } from '../failpoints';
import type { EffectOutcome } from './effects/recording';
import { completePhaseAInBatchLocked, type PhaseAInBatch } from './complete-in-batch';
import { completeLockNeeds, plannedRowsStatements } from './complete-verify';
import { EFFECT_ROW_UNIQUES, takeLocks } from './effects/row-locks';
import { lockClaimedInChainLocked, settleFoldedClaim, type ClaimContext } from './claimed';
import { claimLockedStepLocked, claimStepInContextLocked } from './step-claims';
import { verifyStepRequest, verifyStepSet, type StepRef } from './step-rows';
import type { OperationAuthority, StepClaim, StepRow } from './types';
import type { HeldRecord, LedgerApply, LedgerLocks, LedgerReads, MarkerWithClaim } from './ledger-apply';
import type { TaskLockRow } from './operation-guard';

export type { HeldRecord, LedgerApply, LedgerLocks, LedgerReads, MarkerWithClaim };

/** The ledger-only kinds a batch may take, with their apply, its locks and (optionally) its first reads. */
export type LedgerKinds = Partial<Record<StepKind, { apply: LedgerApply; locks: LedgerLocks; reads?: LedgerReads }>>;

export interface LedgerStepResult {
  claim: StepClaim;
  outcome: EffectOutcome;
}

/** What one batch recorded, and whether it also moved the operation to `completing` (Complete's phase A). */
export interface LedgerBatchResult {
  results: LedgerStepResult[];
  /** Why phase A did not run in the batch, or `completing` when it did; null when the batch armed no launch intent. */
  phaseA: PhaseAInBatch | 'not_asked' | null;
  /** With `completing`: the step rows phase A verified, as committed (phase B guesses from them, ADR 0021). */
  steps?: readonly StepRow[];
  /**
   * Steps whose effect is outside the ledger (Git, providers) that the batch claimed too (`options.effects`):
   * leased claims committed with it, for the caller to perform now, as after a claim of its own (ADR 0040).
   */
  claimed: StepClaim[];
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
      const { claim, ctx } = await claimStepInContextLocked(tx, auth, ref, owner, leaseMs, { recordedHere: true });
      const outcome = await apply(tx, claim, ctx);
      // The claim's compare-and-set went with its record (ADR 0035); without a record it goes now.
      settleFoldedClaim(tx, claim);
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

export interface LedgerBatchOptions {
  /** Run Complete's phase A in this transaction when it arms the launch intent (the caller then runs phase B). */
  phaseA?: boolean;
  /**
   * Kinds whose effect is outside the ledger that this caller performs: their `planned` steps are claimed here
   * too (leased, as a claim of its own) once every ledger step of the batch succeeded, and returned in
   * `claimed`; a kind's ownership marker (`markerWithClaim`) is written with the claim (ADR 0040). Null for a
   * kind the caller does not perform.
   */
  effects?: (kind: StepKind) => { marker?: MarkerWithClaim } | null;
}

/**
 * ClaimAndApplyLedgerSteps: the step `ref` and every other ledger-only step
 * of its operation that is runnable now, claimed, performed and recorded in
 * ONE transaction (issue 14's set-based lever; ADR 0015). The batch is read
 * from the step rows the claim locked: the other `planned` steps whose kind
 * is in `kinds` (a `retry_wait` sibling keeps its back-off), and the launch
 * intent last, once every other step of the operation has succeeded in
 * this transaction.
 *
 * Locks: the claim's tiers 1–7 (every step row of the operation), then the
 * union of the batch's effect locks (`LedgerLocks`, including the launch
 * intent's tiers 8.2–10 when it may follow), in one global order; each
 * kind's own lock requests are then already held. Each step goes through
 * the same claim compare-and-set (generation + 1, lease) and the same record
 * as a claim of its own; each step's `before_ledger_step_commit` failpoint
 * fires after its apply. A conflict of `ref`'s claim writes nothing; an
 * outcome other than success ends the batch there (the rest stay `planned`
 * for the recovery or the retry that outcome starts).
 *
 * With `phaseA` (the inline worker, which then runs phase B), the claim also
 * takes the external-ID key (5.1) and the up-front union also holds
 * Complete's verification locks; a batch that arms the launch intent then
 * runs Complete's phase A before COMMIT (store/complete-in-batch.ts, ADR
 * 0016), which writes nothing when its predicate does not hold.
 *
 * With `effects` (the step worker), a batch whose ledger steps all succeeded
 * and that armed no launch intent also claims the operation's `planned`
 * steps of those kinds whose effect lives outside the ledger (Git,
 * providers): the same compare-and-set as a claim of its own (generation +
 * 1, attempt + 1, a lease read back), committed with the batch, and their
 * ownership markers (tier 14, locked with the union) written with the
 * claims. No effect runs in the transaction; the caller performs them after
 * COMMIT (ADR 0040).
 */
export async function claimAndApplyLedgerSteps(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number,
  kinds: LedgerKinds,
  options: LedgerBatchOptions = {},
): Promise<LedgerBatchResult> {
  return ledgerBatch(db, 'ClaimAndApplyLedgerSteps', { auth, ref }, owner, leaseMs, kinds, options);
}

/**
 * RecordAndApplyLedgerSteps: the record of an effect this worker performed
 * under its live claim (`HeldRecord`: a Git worktree's rows and proof), and
 * then, in the SAME transaction, what the operation may run next in the
 * ledger: its runnable ledger-only steps and the launch intent once every
 * other step has succeeded, with Complete's phase A when asked (ADR 0041).
 * It is the batch above opened by a record instead of a claim: one
 * transaction where there were the record's and the next batch's, and no
 * read of what is runnable in between.
 *
 * Locks: the record's claim path, tiers 1–7 (with the external-ID key 5.1
 * when `phaseA`), then the union of the record's locks (`held.locks`), the
 * batch's effect locks and Complete's verification locks, in one global
 * order. The record goes through its claim's compare-and-set exactly as in
 * its own transaction; anything but its success, or a workspace being
 * deleted, ends the transaction with the record alone. A conflict of the
 * record (`stale_claim`) writes nothing. No event.
 */
export async function recordAndApplyLedgerSteps(
  db: Db,
  claim: StepClaim,
  held: HeldRecord,
  owner: string,
  leaseMs: number,
  kinds: LedgerKinds,
  options: Pick<LedgerBatchOptions, 'phaseA'> = {},
): Promise<LedgerBatchResult> {
  return ledgerBatch(db, 'RecordAndApplyLedgerSteps', { claim, held }, owner, leaseMs, kinds, options);
}

/** What opens a ledger batch: the claim of the step a wake-up named, or the record of an effect performed. */
type Opening = { auth: OperationAuthority; ref: StepRef } | { claim: StepClaim; held: HeldRecord };

/** The opening's claim and context: claimed here, or the live claim's, locked as its own record locks it. */
async function openLocked(
  tx: Tx,
  opening: Opening,
  owner: string,
  leaseMs: number,
  phaseA: boolean,
): Promise<{
  claim: StepClaim;
  ctx: ClaimContext;
  /** What the task chain's locks read, for phase A; null without a task row (nothing then follows the opening). */
  chain: { task: TaskLockRow; identityState: string | undefined } | null;
  /** The workspace is active and the task row there: steps may be claimed after the opening. */
  active: boolean;
}> {
  if ('ref' in opening) {
    // Phase A needs the external-ID key (5.1), which must come before the task row: taken up front when asked.
    const first = await claimStepInContextLocked(tx, opening.auth, opening.ref, owner, leaseMs, {
      externalIdKey: phaseA,
      recordedHere: true,
    });
    return { ...first, active: true };
  }
  const { ctx, chain } = await lockClaimedInChainLocked(tx, opening.claim, { externalIdKey: phaseA });
  verifyStepSet(ctx.steps, ctx.guarded.plan);
  const { task, identityState } = chain;
  // Without its task row nothing follows the record (a claim would find `creation_state_conflict`).
  const known = task === undefined ? null : { task, identityState };
  return { claim: opening.claim, ctx, chain: known, active: known !== null && ctx.guarded.workspaceState === 'active' };
}

async function ledgerBatch(
  db: Db,
  name: string,
  opening: Opening,
  owner: string,
  leaseMs: number,
  kinds: LedgerKinds,
  options: LedgerBatchOptions,
): Promise<LedgerBatchResult> {
  const phaseA = options.phaseA === true;
  const held = 'held' in opening ? opening.held : null;
  // Only the first attempt proves phase A's step rows with fences (ADR 0030): one that failed starts over re-reading.
  let fenceAttempt = phaseA;
  return runTransaction(
    db,
    name,
    async (tx) => {
      const fence = fenceAttempt;
      fenceAttempt = false;
      const first = await openLocked(tx, opening, owner, leaseMs, phaseA);
      const steps = first.ctx.steps;
      // A sibling whose stored request no longer matches the plan stays out: its own wake-up reports that
      // (`evidence_mismatch`), and it does not hold back the step this wake-up was sent for.
      const matchesPlan = (s: StepRow) => {
        try {
          verifyStepRequest(s, first.ctx.guarded.plan);
          return true;
        } catch (err) {
          if (isTaskLedgerError(err, 'evidence_mismatch')) return false;
          throw err;
        }
      };
      // In a workspace being deleted only the opening record runs (its cascade transfers or aborts the rest).
      const runnable = (s: StepRow) =>
        first.active &&
        s.id !== first.claim.stepId &&
        s.state === 'planned' &&
        kinds[s.kind] !== undefined &&
        matchesPlan(s);
      const siblings = steps.filter((s) => s.kind !== 'launch_intent' && runnable(s));
      const batch = new Set([first.claim.stepId, ...siblings.map((s) => s.id)]);
      const launch = steps.find(
        (s) =>
          s.kind === 'launch_intent' &&
          runnable(s) &&
          steps.every((o) => o.kind === 'launch_intent' || o.state === 'succeeded' || batch.has(o.id)),
      );
      const locking = [...(held ? [] : [first.ctx.step]), ...siblings, ...(launch ? [launch] : [])];
      const needs = await Promise.all(locking.map((s) => kinds[s.kind]!.locks(tx, s)));
      if (held) needs.push(held.locks);
      // First-attempt effect steps the batch may claim with itself (below): their markers' locks join the union.
      const effectSteps = launch
        ? []
        : steps.flatMap((s) => {
            const effect = s.state === 'planned' && !LEDGER_ONLY_KINDS.has(s.kind) ? options.effects?.(s.kind) : null;
            return effect && matchesPlan(s) ? [{ step: s, marker: effect.marker }] : [];
          });
      for (const e of effectSteps) if (e.marker) needs.push(e.marker.locks(e.step));
      // When the launch intent may be armed here, Complete's verification locks for the steps that already
      // succeeded (and Begin's environments) join the union, so phase A below finds them held, in order.
      const completeNeeds = phaseA && launch ? completeLockNeeds(steps, first.ctx.guarded.plan) : [];
      // Phase A will re-read rows this batch reads anyway (the effect rows it writes and reads back, the launch
      // intent's world): their answers are kept for it (ADR 0030).
      if (fence && launch) tx.keepAnswers();
      // Issued, not awaited: the first step's reads (its apply finds every lock held) follow the locks in the same
      // round trip, in issue order, so they read under them.
      const locked = takeLocks(tx, [...needs.flat(), ...completeNeeds]);
      // The markers' reads, issued before anything in the batch writes: their locks' answers answer them (a write
      // to their table, as a session's marker, would send them again), and each gives the write for after its claim.
      const markerWrites = new Map(
        effectSteps.flatMap((e) => (e.marker ? [[e.step.id, e.marker.read(tx, e.step)]] : [])),
      );
      // The siblings' first reads (rows just locked, which no step before them writes) go in the same round trip:
      // each sibling's apply then finds them answered and writes without a round trip of its own (ADR 0026).
      for (const s of siblings) tx.readEarly(kinds[s.kind]!.reads?.(s) ?? []);
      // And the rows Begin inserted, which phase A verifies and nothing in the batch writes before it.
      if (fence && launch) tx.readEarly(plannedRowsReads(tx, first.ctx.guarded.plan));

      const current = new Map(steps.map((s) => [s.id, s]));
      const results: LedgerStepResult[] = [];
      const run = async (claimed: { claim: StepClaim; ctx: ClaimContext }, record?: HeldRecord) => {
        const { claim, ctx } = claimed;
        current.set(claim.stepId, ctx.step);
        const now = { ...ctx, steps: [...current.values()] };
        const outcome = record ? await record.record(tx, now) : await kinds[claim.kind]!.apply(tx, claim, now);
        settleFoldedClaim(tx, claim);
        await failpoint('before_ledger_step_commit', {
          kind: claim.kind,
          operationId: claim.operationId,
          stepId: claim.stepId,
        });
        current.set(claim.stepId, { ...ctx.step, state: outcome.state });
        results.push({ claim, outcome });
      };
      const claimNext = (step: StepRow) =>
        claimLockedStepLocked(tx, { guarded: first.ctx.guarded, steps: [...current.values()], step }, owner, leaseMs, {
          recordedHere: true,
        });

      // Anything but a success ends the batch: the operation winds down or waits, as after a claim of its own.
      const going = () => results.every((r) => r.outcome.state === 'succeeded' || r.outcome.state === 'armed');
      await Promise.all([locked, run(first, held ?? undefined)]);
      for (const step of siblings) if (going()) await run(await claimNext(step));
      const ready = [...current.values()].every((s) => s.kind === 'launch_intent' || s.state === 'succeeded');
      if (launch && going() && ready) await run(await claimNext(launch));
      const armed = results.some((r) => r.claim.kind === 'launch_intent' && r.outcome.state === 'armed');
      // The operation's first-attempt effect steps, claimed (leased) with the batch instead of in a transaction of
      // their own after a queue hop of their own; the caller performs them once this commits (ADR 0040).
      const claimed: StepClaim[] = [];
      if (!armed && going()) {
        for (const { step } of effectSteps) {
          const { claim, ctx } = await claimLockedStepLocked(
            tx,
            { guarded: first.ctx.guarded, steps: [...current.values()], step },
            owner,
            leaseMs,
          );
          current.set(claim.stepId, ctx.step);
          await markerWrites.get(step.id)?.(claim);
          claimed.push(claim);
        }
      }
      if (!armed) return { results, phaseA: null, claimed };
      // (An armed launch intent implies an active opening, whose chain is known.)
      if (!phaseA || first.chain === null) return { results, phaseA: 'not_asked', claimed };
      // The step rows as this batch's records left them: phase A verifies them while it re-reads the stored ones.
      const recorded = new Map(results.map((r) => [r.claim.stepId, r.outcome.evidence]));
      const written = [...current.values()].map((row): StepRow => {
        const evidence = recorded.get(row.id);
        if (evidence === undefined) return row;
        const bytes = evidenceBytesOf(evidence);
        return {
          ...row,
          lease_owner: null,
          lease_expires_at: null,
          evidence_json: bytes.json,
          evidence_sha256: bytes.sha256,
        };
      });
      return {
        results,
        claimed,
        ...(await completePhaseAInBatchLocked(tx, first.ctx.guarded, first.chain, written, { fence })),
      };
    },
    { restartOnUnique: EFFECT_ROW_UNIQUES },
  );
}

/**
 * Phase A's reads of the rows Begin inserted, as `verifyPlannedRowsLocked` will issue them in this batch (its planned
 * environments held by the union: read plainly), to go early.
 */
function plannedRowsReads(tx: Tx, plan: CreationPlan): Statement[] {
  return plannedRowsStatements(tx.dialect, plan, true);
}
