/**
 * Recording a claimed step's result: CompleteTaskCreationStep,
 * FailTaskCreationStep, ArmLaunchIntent; and the operator/recovery path
 * ResolveTaskCreationStep for `unknown` steps.
 *
 * Locks (each): workspace 1, operation 4.2, task 5.2, identity 6, steps 7.
 * Each result is a compare-and-set on the claim (state `running`, same
 * generation, same owner, lease not expired by the database clock): a stale
 * or foreign claim changes zero rows and gets `stale_claim`. Evidence is
 * validated against its closed schema and bound to the step's kind, key and
 * request hash before the transaction; its RFC 8785 bytes and hash are what
 * is stored. No event is written.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { evidenceHash } from '../canonical/hash';
import type { StepEvidence, StepFailure } from '../canonical/types';
import { validateStepEvidence, validateStepFailure } from '../canonical/validate';
import { ConflictError, ValidationError } from '../domain/errors';
import type { StepState } from '../domain/vocab';
import { runTransaction, type Db } from '../db/tx';
import { casFromRunning, expectation, lockClaimedLocked } from './claimed';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import {
  findStep,
  lockStepsLocked,
  nonLaunchStepsReady,
  requireCompensationLocked,
  verifyStepRequest,
  type StepRef,
} from './step-rows';
import type { OperationAuthority, StepClaim } from './types';

export interface CompleteStepInput {
  evidence: StepEvidence;
  /** Provider response/delivery handle, when the effect has one. */
  providerHandle?: string | null;
  /** SHA-256 of the operation/step ownership marker persisted before mutation. */
  ownershipMarker?: string | null;
}

/** Why: a transient failure retries after 2^attempt seconds, capped at five
 *  minutes, so a provider outage is not hammered and a blip heals quickly. */
export function retryDelayMs(attempt: number): number {
  return Math.min(300_000, 1000 * 2 ** Math.max(0, attempt - 1));
}

export async function completeTaskCreationStep(db: Db, claim: StepClaim, input: CompleteStepInput): Promise<void> {
  const evidence = validateStepEvidence(input.evidence, expectation(claim));
  if (evidence.effect !== 'present_exact') {
    throw new ValidationError('/effect', 'success evidence must prove the effect present_exact', 'invalid_document');
  }
  if (claim.kind === 'launch_intent') {
    throw new ConflictError(
      'creation_state_conflict',
      'a launch intent is armed with ArmLaunchIntent, not completed',
      {},
    );
  }
  const bytes = canonicalJson(evidence);
  const sha = evidenceHash(evidence);
  await runTransaction(db, 'CompleteTaskCreationStep', async (tx) => {
    const { steps, step } = await lockClaimedLocked(tx, claim);
    casFromRunning(
      tx,
      claim,
      'succeeded',
      ', evidence_json = ?, evidence_sha256 = ?, provider_handle = ?, ownership_marker = ?, error_code = NULL, error_json = NULL',
      [bytes, sha, input.providerHandle ?? null, input.ownershipMarker ?? null],
    );
    // A success that lands after another step failed permanently must be undone.
    if (steps.some((s) => s.state === 'failed')) {
      await requireCompensationLocked(tx, [{ ...step, state: 'succeeded', compensation_state: 'none' }]);
    }
  });
}

export async function failTaskCreationStep(db: Db, claim: StepClaim, failure: StepFailure): Promise<StepState> {
  const valid = validateStepFailure(failure, expectation(claim));
  if (valid.class === 'transient' && valid.evidence?.effect !== 'absent_proven') {
    throw new ValidationError(
      '/evidence',
      'a transient failure needs absent_proven evidence; report an ambiguous failure otherwise',
      'invalid_document',
    );
  }
  const to: StepState = valid.class === 'permanent' ? 'failed' : valid.class === 'transient' ? 'retry_wait' : 'unknown';
  const evidenceBytes = valid.evidence ? canonicalJson(valid.evidence) : null;
  const evidenceSha = valid.evidence ? evidenceHash(valid.evidence) : null;
  const errorJson = canonicalJson({ class: valid.class, code: valid.code, message: valid.message });
  await runTransaction(db, 'FailTaskCreationStep', async (tx) => {
    const { steps, step } = await lockClaimedLocked(tx, claim);
    casFromRunning(
      tx,
      claim,
      to,
      `, evidence_json = ?, evidence_sha256 = ?, error_code = ?, error_json = ?, next_attempt_at = ${to === 'retry_wait' ? tx.nowPlusMs : 'NULL'}`,
      [
        evidenceBytes,
        evidenceSha,
        valid.code.slice(0, 64),
        errorJson,
        ...(to === 'retry_wait' ? [retryDelayMs(step.attempt)] : []),
      ],
    );
    if (to === 'failed') await requireCompensationLocked(tx, steps);
  });
  return to;
}

export async function armLaunchIntent(db: Db, claim: StepClaim, evidenceInput: StepEvidence): Promise<void> {
  const evidence = validateStepEvidence(evidenceInput, expectation(claim));
  if (claim.kind !== 'launch_intent') {
    throw new ConflictError('creation_state_conflict', 'only a launch intent can be armed', { kind: claim.kind });
  }
  if (evidence.effect !== 'present_exact') {
    throw new ValidationError(
      '/effect',
      'arming evidence must prove the exact intent present_exact',
      'invalid_document',
    );
  }
  await runTransaction(db, 'ArmLaunchIntent', async (tx) => {
    const { steps } = await lockClaimedLocked(tx, claim);
    if (!nonLaunchStepsReady(steps)) {
      throw new ConflictError('creation_state_conflict', 'PreLaunchArmPredicate does not hold', {
        operation_id: claim.operationId,
      });
    }
    casFromRunning(tx, claim, 'armed', ', evidence_json = ?, evidence_sha256 = ?', [
      canonicalJson(evidence),
      evidenceHash(evidence),
    ]);
  });
}

export interface ResolveProof {
  /** `succeeded` needs present_exact evidence (an `armed` intent for launch_intent); `retry_wait` and `failed` need absent_proven. */
  resolution: 'succeeded' | 'retry_wait' | 'failed';
  evidence: StepEvidence;
  /**
   * The step generation the proof was observed at. When given, a step that
   * has moved on since (resolved, retried, claimed and unknown again) is
   * `stale_claim` with zero writes: an old observation never decides a newer
   * attempt. Recovery always passes it.
   */
  observedGeneration?: number;
}

/**
 * ResolveTaskCreationStep: `unknown -> succeeded|armed|retry_wait|failed`, only
 * from proof. Same locks as the claim path; bumps the generation so any
 * worker still holding an older claim is fenced off.
 */
export async function resolveTaskCreationStep(
  db: Db,
  auth: OperationAuthority,
  ref: StepRef,
  proof: ResolveProof,
): Promise<StepState> {
  return runTransaction(db, 'ResolveTaskCreationStep', async (tx) => {
    const guarded = await guardOperationLocked(tx, auth, { externalIdKey: false, steps: true });
    if (guarded.op.state !== 'preparing') {
      throw new ConflictError('creation_state_conflict', `operation is ${guarded.op.state}`, {
        operation_id: guarded.op.id,
      });
    }
    await lockTaskChainLocked(tx, guarded.op, { externalIdKey: false, steps: true });
    const steps = await lockStepsLocked(tx, guarded.op.id);
    const step = findStep(steps, ref);
    verifyStepRequest(step, guarded.plan);
    const evidence = validateStepEvidence(proof.evidence, {
      kind: step.kind,
      step_key: step.step_key,
      request_sha256: step.request_sha256,
    });
    if (step.state !== 'unknown') {
      throw new ConflictError('creation_state_conflict', `step is ${step.state}; only unknown steps are resolved`, {
        step_id: step.id,
      });
    }
    if (proof.observedGeneration !== undefined && proof.observedGeneration !== step.generation) {
      throw new ConflictError('stale_claim', 'the step moved on since this proof was observed', {
        step_id: step.id,
        observed_generation: proof.observedGeneration,
        generation: step.generation,
      });
    }
    const wanted = proof.resolution === 'succeeded' ? 'present_exact' : 'absent_proven';
    if (evidence.effect !== wanted) {
      throw new ValidationError(
        '/evidence/effect',
        `resolution ${proof.resolution} needs ${wanted} evidence`,
        'invalid_document',
      );
    }
    const to: StepState =
      proof.resolution === 'succeeded' ? (step.kind === 'launch_intent' ? 'armed' : 'succeeded') : proof.resolution;
    if (to === 'armed' && !nonLaunchStepsReady(steps)) {
      throw new ConflictError('creation_state_conflict', 'PreLaunchArmPredicate does not hold', {
        operation_id: guarded.op.id,
      });
    }
    const changed = await tx.exec(
      `UPDATE task_creation_steps SET state = ?, generation = generation + 1, lease_owner = NULL, lease_expires_at = NULL,
              evidence_json = ?, evidence_sha256 = ?, next_attempt_at = NULL, updated_at = ${tx.now}
        WHERE id = ? AND state = 'unknown' AND generation = ?`,
      [to, canonicalJson(evidence), evidenceHash(evidence), step.id, step.generation],
    );
    if (changed !== 1)
      throw new ConflictError('stale_claim', 'step changed while being resolved', { step_id: step.id });
    if (to === 'failed') await requireCompensationLocked(tx, steps);
    if (to === 'succeeded' && steps.some((s) => s.state === 'failed')) {
      await requireCompensationLocked(tx, [{ ...step, state: 'succeeded', compensation_state: 'none' }]);
    }
    return to;
  });
}
