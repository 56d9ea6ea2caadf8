/**
 * ClaimTaskCreationCompensation, CompleteTaskCreationCompensation,
 * SettleTaskCreationCompensation and ClaimUnknownCompensation.
 *
 * Locks of all four: workspace 1, operation 4.2, task 5.2, identity 6, steps
 * 7; Complete and Settle then the cleanup job a transfer inserts (8.1, a new
 * id); Settle then the effect rows its undo names (tiers 9-15, ascending,
 * FOR UPDATE).
 *
 * - Claim fences `required|retry_wait -> running` (compensation generation
 *   + 1, lease). ClaimUnknownCompensation (recovery only) fences `unknown ->
 *   running` the same way, so the kind's observation-driven undo can run
 *   again (src/compensation/reconcile.ts).
 * - Complete is a compare-and-set on that claim (running, same generation
 *   and owner, lease alive by the database clock) and records
 *   `compensated|transferred|unknown|retry_wait` with a closed
 *   CompensationProof; `transferred` inserts the cleanup job with its full
 *   canonical proof and sets `cleanup_job_id` in the same transaction.
 * - Settle is Complete for an undo that is itself database rows: under the
 *   same locks it lets the undo read its locked effect rows and either
 *   delete/restore the operation-owned untouched ones (`compensated`) or
 *   change nothing (`transferred` with the cleanup proof, `retry_wait`,
 *   `unknown`); the rows and the ledger change in one transaction, so the
 *   ledger never says `compensated` while those rows exist. A stale claim
 *   changes nothing (`stale_claim`).
 * No event.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { cleanupProofHash, compensationProofHash } from '../canonical/hash';
import { compareCanonicalKeys } from '../canonical/sorted-lists';
import type { CompensationProof, StepEvidence } from '../canonical/types';
import { validateCompensationProof, validateStepEvidence } from '../canonical/validate';
import { ConflictError, ValidationError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import type { ObservedRow } from './effects/recording';
import { guardOperationLocked, lockTaskChainLocked, type OperationRow } from './operation-guard';
import { DEFAULT_LEASE_MS } from './step-claims';
import { findStep, findStepById, lockStepsLocked, verifyStepRequest, type StepRef } from './step-rows';
import { retryDelayMs } from './step-results';
import type { CompensationClaim, OperationAuthority, StepRow } from './types';

type ClaimableFrom = 'required' | 'retry_wait' | 'unknown';

async function claimFrom(
  db: Db,
  name: string,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number,
  from: readonly ClaimableFrom[],
): Promise<CompensationClaim> {
  return runTransaction(db, name, async (tx) => {
    const { op, plan } = await guardOperationLocked(tx, auth, { externalIdKey: false, steps: true });
    if (op.state !== 'preparing') {
      throw new ConflictError(
        'creation_state_conflict',
        `operation is ${op.state}; compensation runs while preparing`,
        { operation_id: op.id },
      );
    }
    await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
    const steps = await lockStepsLocked(tx, op.id);
    const step = findStep(steps, ref);
    const request = verifyStepRequest(step, plan);
    if (!(from as readonly string[]).includes(step.compensation_state)) {
      throw new ConflictError(
        'creation_state_conflict',
        `compensation is ${step.compensation_state}; only ${from.join(' or ')} can be claimed here`,
        { step_id: step.id },
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

export async function claimTaskCreationCompensation(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<CompensationClaim> {
  return claimFrom(db, 'ClaimTaskCreationCompensation', auth, ref, owner, leaseMs, ['required', 'retry_wait']);
}

/** Recovery only: `unknown -> running`, so the kind's observation-driven undo can decide again. */
export async function claimUnknownCompensation(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<CompensationClaim> {
  return claimFrom(db, 'ClaimUnknownCompensation', auth, ref, owner, leaseMs, ['unknown']);
}

export interface CleanupTransfer {
  /** Short machine reason, e.g. `worktree_modified`. */
  reason: string;
  /** The complete canonical proof the cleanup worker acts on. */
  proof: Record<string, unknown>;
}

function checkTransferShape(proof: CompensationProof, transfer: CleanupTransfer | null): void {
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
}

/** Workspace 1 .. steps 7 for a live compensation claim; the claim's step row. */
async function lockCompensationLocked(tx: Tx, claim: CompensationClaim): Promise<{ op: OperationRow; step: StepRow }> {
  const { op } = await guardOperationLocked(
    tx,
    {
      kind: 'operation',
      operationId: claim.operationId,
      actor: claim.owner,
    },
    { externalIdKey: false, steps: true },
  );
  await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
  const steps = await lockStepsLocked(tx, op.id);
  return { op, step: findStepById(steps, claim.stepId) };
}

function staleClaim(claim: CompensationClaim): ConflictError {
  return new ConflictError('stale_claim', 'compensation claim is stale: generation, owner or lease no longer matches', {
    step_id: claim.stepId,
  });
}

/** The claim CAS predicate, read-only (before an undo writes effect rows). */
async function assertCompensationLiveLocked(tx: Tx, claim: CompensationClaim): Promise<void> {
  const live = await tx.rows(
    `SELECT id FROM task_creation_steps
      WHERE id = ? AND compensation_state = 'running' AND compensation_generation = ? AND compensation_lease_owner = ?
        AND compensation_lease_expires_at > ${tx.now}`,
    [claim.stepId, claim.compensationGeneration, claim.owner],
  );
  if (live.length !== 1) throw staleClaim(claim);
}

/** The compare-and-set of a compensation result, plus the transfer's cleanup job. */
async function recordCompensationLocked(
  tx: Tx,
  op: OperationRow,
  step: StepRow,
  claim: CompensationClaim,
  proof: CompensationProof,
  transfer: CleanupTransfer | null,
): Promise<void> {
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
  if (changed !== 1) throw staleClaim(claim);
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
  checkTransferShape(proof, transfer);
  await runTransaction(db, 'CompleteTaskCreationCompensation', async (tx) => {
    const { op, step } = await lockCompensationLocked(tx, claim);
    await recordCompensationLocked(tx, op, step, claim, proof, transfer);
  });
}

/** What an undo found under its locks, and what it did. */
export interface CompensationSettlement {
  outcome: CompensationProof['outcome'];
  /** Short, human reason (proof observation `reason`). */
  reason: string;
  /** Effect rows as they are after the undo (`row_sha256: null`: proven absent). */
  rows: ObservedRow[];
  /** For `transferred` only: the cleanup job's reason and complete proof. */
  transfer?: CleanupTransfer;
}

export interface LockedUndo {
  /** Takes the effect-row locks (tiers above 8.1, in ascending order). */
  lock(tx: Tx): Promise<void>;
  /**
   * Under those locks: reads the effect rows and either undoes the
   * operation-owned untouched ones (outcome `compensated`) or writes nothing
   * (any other outcome).
   */
  settle(tx: Tx): Promise<CompensationSettlement>;
}

/** A closed CompensationProof for a claim (rows sorted and unique by table, key). */
export function compensationProofOf(
  claim: CompensationClaim,
  outcome: CompensationProof['outcome'],
  cleanupJobId: string | null,
  reason: string,
  rows: ObservedRow[],
): CompensationProof {
  const unique = new Map(rows.map((r) => [`${r.table}\u0000${r.key}`, r]));
  const sorted = [...unique.values()].sort((a, b) => compareCanonicalKeys([a.table, a.key], [b.table, b.key]));
  return validateCompensationProof(
    {
      version: 1,
      kind: claim.kind,
      step_key: claim.stepKey,
      request_sha256: claim.requestSha256,
      outcome,
      cleanup_job_id: cleanupJobId,
      observation: { reason: reason.slice(0, 200), rows: sorted },
      observed_at: new Date().toISOString(),
    },
    { kind: claim.kind, step_key: claim.stepKey, request_sha256: claim.requestSha256 },
  );
}

export interface SettledCompensation {
  outcome: CompensationProof['outcome'];
  reason: string;
  cleanupJobId: string | null;
}

export async function settleTaskCreationCompensation(
  db: Db,
  claim: CompensationClaim,
  undo: LockedUndo,
): Promise<SettledCompensation> {
  return runTransaction(db, 'SettleTaskCreationCompensation', async (tx) => {
    const { op, step } = await lockCompensationLocked(tx, claim);
    if (op.state !== 'preparing') {
      throw new ConflictError('stale_claim', `operation is ${op.state}; this compensation can no longer record`, {
        operation_id: op.id,
      });
    }
    await assertCompensationLiveLocked(tx, claim);
    // A transfer's cleanup job is a new row at 8.1: its place in the order is taken before the effect rows.
    const jobId = randomUUID();
    tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', jobId);
    await undo.lock(tx);
    const s = await undo.settle(tx);
    const transfer = s.outcome === 'transferred' ? (s.transfer ?? null) : null;
    const proof = compensationProofOf(claim, s.outcome, transfer ? jobId : null, s.reason, s.rows);
    checkTransferShape(proof, transfer);
    await recordCompensationLocked(tx, op, step, claim, proof, transfer);
    return { outcome: s.outcome, reason: s.reason, cleanupJobId: proof.cleanup_job_id };
  });
}
