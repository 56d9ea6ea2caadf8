/**
 * Shared, lock-holding helpers for recording the result of a live step claim.
 * `lockClaimedLocked` takes the claim path's locks (workspace 1, operation
 * 4.2, task 5.2, identity 6, steps 7) and re-derives the step's request;
 * `casFromRunning` is the compare-and-set every claimed result goes through
 * (state running, same generation and owner, lease not expired by the
 * database clock) — a stale claim changes zero rows and gets `stale_claim`.
 * Neither begins a transaction.
 */
import { ConflictError } from '../domain/errors';
import type { StepState } from '../domain/vocab';
import type { SqlParam, Tx } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked, type GuardedOperation } from './operation-guard';
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
  const guarded = await guardOperationLocked(
    tx,
    {
      kind: 'operation',
      operationId: claim.operationId,
      actor: claim.owner,
    },
    { externalIdKey: false, steps: true },
  );
  if (guarded.op.state !== 'preparing') {
    throw new ConflictError('stale_claim', `operation is ${guarded.op.state}; this claim can no longer record`, {
      operation_id: claim.operationId,
    });
  }
  await lockTaskChainLocked(tx, guarded.op, { externalIdKey: false, steps: true });
  const steps = await lockStepsLocked(tx, claim.operationId);
  const step = findStepById(steps, claim.stepId);
  verifyStepRequest(step, guarded.plan);
  if (step.request_sha256 !== claim.requestSha256) {
    throw new ConflictError('evidence_mismatch', 'claim request hash differs from the stored request', {
      step_id: step.id,
    });
  }
  return { guarded, steps, step };
}

/**
 * The compare-and-set every claimed result goes through. Sent without waiting
 * (`Tx.expect`): it travels with the transaction's next statements, and the
 * runner checks it took before COMMIT — a stale claim rolls back everything
 * after it and throws `stale_claim`.
 */
export function casFromRunning(tx: Tx, claim: StepClaim, to: StepState, sets: string, params: SqlParam[]): void {
  tx.expect(
    {
      sql: `UPDATE task_creation_steps SET state = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ${tx.now}${sets}
      WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
      params: [to, ...params, claim.stepId, claim.generation, claim.owner],
    },
    1,
    () =>
      new ConflictError('stale_claim', 'claim is stale: generation, owner or lease no longer matches', {
        step_id: claim.stepId,
        generation: claim.generation,
      }),
  );
}
