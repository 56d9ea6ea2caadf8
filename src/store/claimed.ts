/**
 * Shared, lock-holding helpers for recording the result of a live step claim.
 * `lockClaimedLocked` takes the claim path's locks (workspace 1, operation
 * 4.2, task 5.2, identity 6, steps 7) and re-derives the step's request;
 * `casFromRunning` is the compare-and-set every claimed result goes through
 * (state running, same generation and owner, lease not expired by the
 * database clock) — a stale claim changes zero rows and gets `stale_claim`.
 * A claim made by the transaction that records it (a ledger batch) is folded
 * into its record (ADR 0035): `foldClaim` holds the claim's own
 * compare-and-set back, the first `casFromRunning` of that claim performs
 * both in one UPDATE, and `settleFoldedClaim` sends the claim's own when no
 * record came. None begins a transaction.
 */
import { ConflictError } from '../domain/errors';
import type { StepState } from '../domain/vocab';
import type { Statement } from '../db/batch';
import type { SqlParam, Tx } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked, type GuardedOperation, type TaskLockRow } from './operation-guard';
import { findStepById, lockStepsLocked, verifyStepRequest } from './step-rows';
import type { StepClaim, StepRow } from './types';

export function expectation(claim: StepClaim) {
  return { kind: claim.kind, step_key: claim.stepKey, request_sha256: claim.requestSha256 };
}

export interface ClaimContext {
  guarded: GuardedOperation;
  steps: StepRow[];
  step: StepRow;
}

export async function lockClaimedLocked(tx: Tx, claim: StepClaim): Promise<ClaimContext> {
  return (await lockClaimedInChainLocked(tx, claim)).ctx;
}

/**
 * `lockClaimedLocked` that also says what the task chain's locks read (for Complete's phase A) and, with
 * `externalIdKey`, takes the task's external-ID key (5.1) first, as a claim that may go on to phase A does
 * (`claimStepInContextLocked`): for a record that opens a ledger batch (store/ledger-step.ts, ADR 0041).
 */
export async function lockClaimedInChainLocked(
  tx: Tx,
  claim: StepClaim,
  options: { externalIdKey?: boolean } = {},
): Promise<{ ctx: ClaimContext; chain: { task: TaskLockRow | undefined; identityState: string | undefined } }> {
  // Its row is still as claimed from until its record: it is recorded with the context it was claimed in.
  if (folded.get(claim)?.recorded === false) throw new Error('internal: a folded claim re-locked before its record');
  const externalIdKey = options.externalIdKey === true;
  const guarded = await guardOperationLocked(
    tx,
    {
      kind: 'operation',
      operationId: claim.operationId,
      actor: claim.owner,
    },
    externalIdKey
      ? { externalIdKey, steps: true, ownTaskOnly: true, planned: true }
      : { externalIdKey: false, steps: true },
  );
  if (guarded.op.state !== 'preparing') {
    throw new ConflictError('stale_claim', `operation is ${guarded.op.state}; this claim can no longer record`, {
      operation_id: claim.operationId,
    });
  }
  const chain = await lockTaskChainLocked(
    tx,
    guarded.op,
    externalIdKey
      ? { externalIdKey, externalIdAbsent: guarded.externalIdAbsent, steps: true, planned: true }
      : { externalIdKey: false, steps: true },
  );
  const steps = await lockStepsLocked(tx, claim.operationId);
  const step = findStepById(steps, claim.stepId);
  verifyStepRequest(step, guarded.plan);
  if (step.request_sha256 !== claim.requestSha256) {
    throw new ConflictError('evidence_mismatch', 'claim request hash differs from the stored request', {
      step_id: step.id,
    });
  }
  return { ctx: { guarded, steps, step }, chain };
}

/** The claim's compare-and-set of `step` (planned or retry_wait -> running, generation and attempt raised, leased). */
export function claimCasStatement(tx: Tx, step: StepRow, owner: string, leaseMs: number): Statement {
  return {
    sql: `UPDATE task_creation_steps
          SET state = 'running', generation = generation + 1, attempt = attempt + 1,
              lease_owner = ?, lease_expires_at = ${tx.nowPlusMs}, next_attempt_at = NULL, updated_at = ${tx.now}
        WHERE id = ? AND generation = ? AND state = ?`,
    params: [owner, leaseMs, step.id, step.generation, step.state],
  };
}

/** A claim whose compare-and-set was held back for its record (`foldClaim`). */
interface FoldedClaim {
  /** The claim's own compare-and-set, for `settleFoldedClaim`. */
  cas: Statement;
  /** The step row's generation and state it claims from. */
  generation: number;
  state: string;
  /**
   * When its lease would have run out (`performance.now()`, ms): a record after it is stale, as it was against
   * the lease the claim's own UPDATE set, though no other transaction can see this claim before COMMIT.
   */
  deadline: number;
  recorded: boolean;
}

/** The columns the claim part of a folded record sets: a record's own `sets` must name none of them. */
const CLAIM_COLUMNS = /\b(?:state|generation|attempt|lease_owner|lease_expires_at|updated_at)\s*=/;

const folded = new WeakMap<StepClaim, FoldedClaim>();

const staleClaim = (claim: StepClaim) => () =>
  new ConflictError('stale_claim', 'claim is stale: generation, owner or lease no longer matches', {
    step_id: claim.stepId,
    generation: claim.generation,
  });

/**
 * Holds back the compare-and-set of a claim this transaction records too (ADR 0035): its first record performs
 * both in one UPDATE, from the row as claimed (`step`), which this transaction holds locked (tier 7). The caller
 * must call `settleFoldedClaim` once the effect ran, before COMMIT.
 */
export function foldClaim(claim: StepClaim, step: StepRow, cas: Statement, leaseMs: number): void {
  folded.set(claim, {
    cas,
    generation: step.generation,
    state: step.state,
    deadline: performance.now() + leaseMs,
    recorded: false,
  });
}

/** A folded claim whose lease would have run out by now (elapsed time on this process's monotonic clock). */
function expired(f: FoldedClaim): boolean {
  return performance.now() > f.deadline;
}

/** Sends a folded claim's own compare-and-set when no record performed it (the row then stays claimed, leased). */
export function settleFoldedClaim(tx: Tx, claim: StepClaim): void {
  const f = folded.get(claim);
  if (f === undefined || f.recorded) return;
  f.recorded = true;
  tx.expect(
    f.cas,
    1,
    () => new ConflictError('stale_claim', 'step changed while being claimed', { step_id: claim.stepId }),
  );
}

/** The claim's liveness predicate: running under it, or — folded and not yet recorded — still as claimed from. */
export function claimLivePredicate(tx: Tx, claim: StepClaim): { where: string; params: SqlParam[] } {
  const f = folded.get(claim);
  if (f !== undefined && !f.recorded) {
    // Past its lease it is not live (matches no row), as the claim's own lease would no longer match.
    const live = expired(f) ? ' AND 1 = 0' : '';
    return { where: `id = ? AND generation = ? AND state = ?${live}`, params: [claim.stepId, f.generation, f.state] };
  }
  return {
    where: `id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
    params: [claim.stepId, claim.generation, claim.owner],
  };
}

/**
 * The liveness check as a fence (`Tx.expect`, ADR 0028): the SELECT travels with the transaction's next statements
 * instead of a round trip of its own, and the runner checks before COMMIT that it answered the claim's row — a
 * stale claim rolls back everything after it and throws `stale_claim`, as `assertClaimLiveLocked` would have before
 * it. Only for a claim of its own (leased, `running`): a folded claim's row changes at its record, which may be
 * issued before the fence would be answered (ADR 0040).
 */
export function expectClaimLiveLocked(tx: Tx, claim: StepClaim): void {
  if (folded.get(claim)?.recorded === false) throw new Error('internal: a folded claim is checked as it is read');
  const { where, params } = claimLivePredicate(tx, claim);
  tx.expect({ sql: `SELECT id FROM task_creation_steps WHERE ${where}`, params }, 1, staleClaim(claim));
}

/**
 * The compare-and-set every claimed result goes through. Sent without waiting
 * (`Tx.expect`): it travels with the transaction's next statements, and the
 * runner checks it took before COMMIT — a stale claim rolls back everything
 * after it and throws `stale_claim`. The first record of a folded claim
 * (`foldClaim`) also performs the claim: the generation and attempt are raised
 * and the row goes from its claimed-from state straight to `to`.
 */
export function casFromRunning(tx: Tx, claim: StepClaim, to: StepState, sets: string, params: SqlParam[]): void {
  const f = folded.get(claim);
  if (f !== undefined && !f.recorded) {
    if (CLAIM_COLUMNS.test(sets)) throw new Error(`internal: a record's sets name a claim column ("${sets}")`);
    // Past its lease, stale as before: the transaction rolls back (nothing of it commits).
    if (expired(f)) throw staleClaim(claim)();
    f.recorded = true;
    const nextAttempt = /\bnext_attempt_at\b/.test(sets) ? '' : ', next_attempt_at = NULL';
    tx.expect(
      {
        sql: `UPDATE task_creation_steps SET state = ?, generation = generation + 1, attempt = attempt + 1,
          lease_owner = NULL, lease_expires_at = NULL${nextAttempt}, updated_at = ${tx.now}${sets}
        WHERE id = ? AND generation = ? AND state = ?`,
        params: [to, ...params, claim.stepId, f.generation, f.state],
      },
      1,
      staleClaim(claim),
    );
    return;
  }
  tx.expect(
    {
      sql: `UPDATE task_creation_steps SET state = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ${tx.now}${sets}
      WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
      params: [to, ...params, claim.stepId, claim.generation, claim.owner],
    },
    1,
    staleClaim(claim),
  );
}
