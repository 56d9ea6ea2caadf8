/**
 * ClaimTaskCreationStep and RenewTaskCreationStepLease.
 *
 * Claim — locks: workspace 1, (authority 1.5), operation 4.2, task 5.2,
 * identity 6, steps 7. Changes one step `planned|retry_wait -> running`,
 * generation + 1, attempt + 1, lease owner and expiry (database clock). Only
 * in an active workspace (`workspace_deleting` otherwise), while the
 * operation is `preparing`, no step failed permanently and no
 * compensation is pending; a launch intent only when PreLaunchArmPredicate's
 * other steps hold. No event. Conflicts write nothing. A claim of its own
 * (`claimTaskCreationStep`) sends its compare-and-set and the lease's
 * read-back with COMMIT: two round trips, the guard's and the commit's.
 */
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import type { StatementResult } from '../db/batch';
import { runTransaction, type Db, type Tx } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked, type TaskLockRow } from './operation-guard';
import {
  COMPENSATION_PENDING,
  findStep,
  lockStepsLocked,
  nonLaunchStepsReady,
  verifyStepRequest,
  verifyStepSet,
  type StepRef,
} from './step-rows';
import { claimCasStatement, foldClaim, type ClaimContext } from './claimed';
import type { OperationAuthority, StepClaim, StepRow } from './types';

/** Why 30 s by default (TASKLEDGER_LEASE_MS): long enough that a worker's
 *  heartbeat (every lease/3) survives a GC pause or a slow Git checkout, short
 *  enough that a killed worker's step turns `unknown` within a sweep or two. */
export const DEFAULT_LEASE_MS = 30_000;

export async function claimTaskCreationStep(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<StepClaim> {
  // The compare-and-set and the lease's read-back travel with COMMIT (ADR 0040): the claim is one round trip
  // after the guard's, and its lease is read once the claim committed.
  const { claim, lease } = await runTransaction(db, 'ClaimTaskCreationStep', async (tx) => {
    const claimed = await claimStepInContextLocked(tx, auth, ref, owner, leaseMs, { leaseAtCommit: true });
    return { claim: claimed.claim, lease: claimed.leaseAtCommit! };
  });
  // The read-back is the last of the statements sent with COMMIT.
  const results = await lease;
  const row = results[results.length - 1]?.rows[0] as { lease_expires_at: Date } | undefined;
  if (!row) throw new Error('internal: the claimed step row did not read back after COMMIT');
  return { ...claim, leaseExpiresAt: new Date(row.lease_expires_at) };
}

/**
 * The claim and what recording it needs (`ClaimContext`, as `lockClaimedLocked`
 * would read it back): for the effect that follows in the same transaction
 * (store/ledger-step.ts), so it neither re-locks nor re-reads.
 */
export async function claimStepInContextLocked(
  tx: Tx,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number,
  /** Also take the task's external-ID key (5.1), for a transaction that may go on to Complete's phase A. */
  options: { externalIdKey?: boolean; recordedHere?: boolean; leaseAtCommit?: boolean } = {},
): Promise<{
  claim: StepClaim;
  ctx: ClaimContext;
  chain: { task: TaskLockRow; identityState: string | undefined };
  leaseAtCommit?: Promise<StatementResult[]>;
}> {
  const externalIdKey = options.externalIdKey === true;
  // A transaction that may go on to phase A checks Begin's rows: its locks read them too (`planned`, ADR 0034).
  const guarded = await guardOperationLocked(tx, auth, {
    externalIdKey,
    steps: true,
    ownTaskOnly: true,
    planned: externalIdKey,
  });
  const { op, plan, workspaceState } = guarded;
  if (workspaceState !== 'active') {
    // The workspace deletion cascade transfers or aborts what exists; no new effect starts.
    throw new ConflictError('workspace_deleting', 'the workspace is being deleted; no step starts', {
      operation_id: op.id,
    });
  }
  if (op.state !== 'preparing') {
    throw new ConflictError(
      'creation_state_conflict',
      `operation is ${op.state}; steps can only be claimed while preparing`,
      {
        operation_id: op.id,
        state: op.state,
      },
    );
  }
  const { task, identityState } = await lockTaskChainLocked(tx, op, {
    externalIdKey,
    externalIdAbsent: guarded.externalIdAbsent,
    steps: true,
    planned: externalIdKey,
  });
  if (!task)
    throw new ConflictError('creation_state_conflict', 'the task row of this operation is gone', {
      operation_id: op.id,
    });
  const steps = await lockStepsLocked(tx, op.id);
  verifyStepSet(steps, plan);
  const claimed = await claimLockedStepLocked(tx, { guarded, steps, step: findStep(steps, ref) }, owner, leaseMs, {
    recordedHere: options.recordedHere,
    leaseAtCommit: options.leaseAtCommit,
  });
  return { ...claimed, chain: { task, identityState } };
}

/**
 * Claims `base.step`, one of `base.steps` — the operation's step rows this
 * transaction already locked (tier 7) after guarding the operation (tiers
 * 1–6) — with the same checks and compare-and-set as a claim of its own.
 * `base.steps` must say what the transaction has recorded so far: a launch
 * intent is claimable only when every other step in it has succeeded.
 */
export async function claimLockedStepLocked(
  tx: Tx,
  base: ClaimContext,
  owner: string,
  leaseMs: number,
  /**
   * `recordedHere`: this transaction records the step too (a ledger batch): the claim's compare-and-set is folded
   * into its record (ADR 0035), and the caller calls `settleFoldedClaim` after the effect; no lease is read back.
   */
  /**
   * `leaseAtCommit`: nothing follows the claim in this transaction (a claim of its own): the compare-and-set is
   * expected to change one row and is sent with COMMIT, and so is the lease's read-back, the last result of
   * `leaseAtCommit` once committed; the claim's `leaseExpiresAt` is null until the caller fills it from that.
   */
  options: { recordedHere?: boolean; leaseAtCommit?: boolean } = {},
): Promise<{ claim: StepClaim; ctx: ClaimContext; leaseAtCommit?: Promise<StatementResult[]> }> {
  const { guarded, steps, step } = base;
  const { op, plan } = guarded;
  const request = verifyStepRequest(step, plan);
  if (step.state !== 'planned' && step.state !== 'retry_wait') {
    throw new ConflictError(
      'creation_state_conflict',
      `step is ${step.state}; only planned or retry_wait steps can be claimed`,
      {
        step_id: step.id,
        state: step.state,
      },
    );
  }
  if (steps.some((s) => s.state === 'failed' || COMPENSATION_PENDING.has(s.compensation_state))) {
    throw new ConflictError('creation_state_conflict', 'operation is winding down (a step failed permanently)', {
      operation_id: op.id,
    });
  }
  if (step.kind === 'launch_intent' && !nonLaunchStepsReady(steps)) {
    throw new ConflictError(
      'creation_state_conflict',
      'launch intent can be claimed only after every other step succeeded',
      {
        operation_id: op.id,
      },
    );
  }
  const cas = claimCasStatement(tx, step, owner, leaseMs);
  const stale = () => new ConflictError('stale_claim', 'step changed while being claimed', { step_id: step.id });
  let leaseExpiresAt: Date | null = null;
  let leaseAtCommit: Promise<StatementResult[]> | undefined;
  if (options.leaseAtCommit === true) {
    tx.expect(cas, 1, stale);
    leaseAtCommit = tx.commitWith([
      { sql: 'SELECT lease_expires_at FROM task_creation_steps WHERE id = ?', params: [step.id] },
    ]);
  } else if (options.recordedHere !== true) {
    // The update and the read-back travel together (Tx.batch); the read is only used when the update took.
    const [changed, lease] = await Promise.all([
      tx.exec(cas.sql, [...cas.params]),
      tx.one<{ lease_expires_at: Date }>('SELECT lease_expires_at FROM task_creation_steps WHERE id = ?', [step.id]),
    ]);
    if (changed !== 1) throw stale();
    leaseExpiresAt = new Date(lease!.lease_expires_at);
  }
  const claim: StepClaim = {
    operationId: op.id,
    stepId: step.id,
    kind: step.kind,
    stepKey: step.step_key,
    generation: step.generation + 1,
    owner,
    leaseExpiresAt,
    request,
    requestSha256: step.request_sha256,
    idempotencyKey: step.idempotency_key,
  };
  // Recorded in this transaction: the compare-and-set is held back and its record performs it (ADR 0035).
  if (options.recordedHere === true) foldClaim(claim, step, cas, leaseMs);
  // The step row as the UPDATE left it (every other step is locked and unchanged).
  const running: StepRow = {
    ...step,
    state: 'running',
    generation: claim.generation,
    attempt: step.attempt + 1,
    lease_owner: owner,
    lease_expires_at: leaseExpiresAt,
  };
  const ctx: ClaimContext = { guarded, steps: steps.map((s) => (s.id === step.id ? running : s)), step: running };
  return { claim, ctx, leaseAtCommit };
}

/**
 * Heartbeat: extends a live claim's lease. Locks only the step row (tier 7).
 * A stale, foreign or already-expired claim changes nothing and gets
 * `stale_claim` (an expired lease is the reaper's to turn `unknown`).
 */
export async function renewTaskCreationStepLease(
  db: Db,
  claim: StepClaim,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<Date> {
  return runTransaction(db, 'RenewTaskCreationStepLease', async (tx) => {
    tx.lockRow(TIER.STEP, 'task_creation_steps', claim.stepId);
    const [changed, row] = await Promise.all([
      tx.exec(
        `UPDATE task_creation_steps SET lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
          WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
        [leaseMs, claim.stepId, claim.generation, claim.owner],
      ),
      tx.one<{ lease_expires_at: Date }>('SELECT lease_expires_at FROM task_creation_steps WHERE id = ?', [
        claim.stepId,
      ]),
    ]);
    if (changed !== 1)
      throw new ConflictError('stale_claim', 'lease is no longer held by this claim', { step_id: claim.stepId });
    return new Date(row!.lease_expires_at);
  });
}
