/**
 * ClaimTaskCreationCompensation and CompleteTaskCreationCompensation.
 *
 * Locks: workspace 1, operation 4.2, task 5.2, identity 6, steps 7, then for
 * a transfer the new cleanup job 8.1. Claim fences `required|retry_wait ->
 * running` (compensation generation + 1, lease). Complete is a compare-and-set
 * on that claim and records `compensated|transferred|unknown|retry_wait` with
 * a closed CompensationProof; `transferred` inserts the cleanup job with its
 * full canonical proof and sets `cleanup_job_id` in the same transaction.
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { cleanupProofHash, compensationProofHash } from '../canonical/hash';
import type { CompensationProof, StepEvidence } from '../canonical/types';
import { validateCompensationProof, validateStepEvidence } from '../canonical/validate';
import { ConflictError, ValidationError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { DEFAULT_LEASE_MS } from './step-claims';
import { findStep, findStepById, lockStepsLocked, verifyStepRequest, type StepRef } from './step-rows';
import { retryDelayMs } from './step-results';
import type { CompensationClaim, OperationAuthority } from './types';

export async function claimTaskCreationCompensation(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<CompensationClaim> {
  return runTransaction(db, 'ClaimTaskCreationCompensation', async (tx) => {
    const { op, plan } = await guardOperationLocked(tx, auth);
    if (op.state !== 'preparing') {
      throw new ConflictError(
        'creation_state_conflict',
        `operation is ${op.state}; compensation runs while preparing`,
        { operation_id: op.id },
      );
    }
    await lockTaskChainLocked(tx, op, { externalIdKey: false });
    const steps = await lockStepsLocked(tx, op.id);
    const step = findStep(steps, ref);
    const request = verifyStepRequest(step, plan);
    if (step.compensation_state !== 'required' && step.compensation_state !== 'retry_wait') {
      throw new ConflictError(
        'creation_state_conflict',
        `compensation is ${step.compensation_state}; only required or retry_wait can be claimed`,
        {
          step_id: step.id,
        },
      );
    }
    const changed = await tx.exec(
      `UPDATE task_creation_steps SET compensation_state = 'running', compensation_generation = compensation_generation + 1,
              compensation_lease_owner = ?, compensation_lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
        WHERE id = ? AND compensation_generation = ? AND compensation_state = ?`,
      [owner, leaseMs, step.id, step.compensation_generation, step.compensation_state],
    );
    if (changed !== 1)
      throw new ConflictError('stale_claim', 'compensation changed while being claimed', { step_id: step.id });
    const row = await tx.one<{ compensation_lease_expires_at: Date }>(
      'SELECT compensation_lease_expires_at FROM task_creation_steps WHERE id = ?',
      [step.id],
    );
    let evidence: StepEvidence | null = null;
    if (step.evidence_json !== null) {
      evidence = validateStepEvidence(parseCanonical(step.evidence_json), {
        kind: step.kind,
        step_key: step.step_key,
        request_sha256: step.request_sha256,
      });
    }
    return {
      operationId: op.id,
      stepId: step.id,
      kind: step.kind,
      stepKey: step.step_key,
      compensationGeneration: step.compensation_generation + 1,
      owner,
      leaseExpiresAt: new Date(row!.compensation_lease_expires_at),
      request,
      requestSha256: step.request_sha256,
      idempotencyKey: step.idempotency_key,
      evidence,
    };
  });
}

export interface CleanupTransfer {
  /** Short machine reason, e.g. `worktree_modified`. */
  reason: string;
  /** The complete canonical proof the cleanup worker acts on. */
  proof: Record<string, unknown>;
}

export async function completeTaskCreationCompensation(
  db: Db,
  claim: CompensationClaim,
  proofInput: CompensationProof,
  transfer: CleanupTransfer | null = null,
): Promise<void> {
  const proof = validateCompensationProof(proofInput, {
    kind: claim.kind,
    step_key: claim.stepKey,
    request_sha256: claim.requestSha256,
  });
  if (
    (proof.outcome === 'transferred') !== (transfer !== null) ||
    (proof.outcome === 'transferred') !== (proof.cleanup_job_id !== null)
  ) {
    throw new ValidationError(
      '/cleanup_job_id',
      'a transfer needs exactly one cleanup job and its id in the proof; other outcomes none',
      'invalid_document',
    );
  }
  await runTransaction(db, 'CompleteTaskCreationCompensation', async (tx) => {
    const { op } = await guardOperationLocked(tx, {
      kind: 'operation',
      operationId: claim.operationId,
      actor: claim.owner,
    });
    await lockTaskChainLocked(tx, op, { externalIdKey: false });
    const steps = await lockStepsLocked(tx, op.id);
    const step = findStepById(steps, claim.stepId);
    const changed = await tx.exec(
      `UPDATE task_creation_steps SET compensation_state = ?, compensation_lease_owner = NULL, compensation_lease_expires_at = NULL,
              compensation_evidence_json = ?, compensation_evidence_sha256 = ?, cleanup_job_id = ?,
              next_attempt_at = ${proof.outcome === 'retry_wait' ? tx.nowPlusMs : 'NULL'}, updated_at = ${tx.now}
        WHERE id = ? AND compensation_state = 'running' AND compensation_generation = ? AND compensation_lease_owner = ?
          AND compensation_lease_expires_at > ${tx.now}`,
      [
        proof.outcome,
        canonicalJson(proof),
        compensationProofHash(proof),
        proof.cleanup_job_id,
        ...(proof.outcome === 'retry_wait' ? [retryDelayMs(step.attempt)] : []),
        claim.stepId,
        claim.compensationGeneration,
        claim.owner,
      ],
    );
    if (changed !== 1) {
      throw new ConflictError(
        'stale_claim',
        'compensation claim is stale: generation, owner or lease no longer matches',
        { step_id: claim.stepId },
      );
    }
    if (transfer !== null) {
      tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', proof.cleanup_job_id!);
      await tx.exec(
        `INSERT INTO task_resource_cleanup_jobs (id, workspace_id, task_id, operation_id, step_id, kind, reason, proof_json, proof_sha256, state, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ${tx.now}, ${tx.now})`,
        [
          proof.cleanup_job_id!,
          op.workspace_id,
          op.task_id,
          op.id,
          step.id,
          step.kind,
          transfer.reason.slice(0, 64),
          canonicalJson(transfer.proof),
          cleanupProofHash(transfer.proof),
        ],
      );
    }
  });
}
