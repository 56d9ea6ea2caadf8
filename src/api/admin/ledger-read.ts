/**
 * Read models of the ledger view (plain autocommit reads, no locks, no writes):
 * - `legalActionNow`: the one legal RecoveryAction as the pure chooser sees the
 *   rows right now (what the button offers; the Store re-chooses under lock
 *   when it is pressed, and refuses a stale one);
 * - `operationExtras`: what the REST read model does not carry — hash
 *   verifications of the plan, actor, each step's request, evidence and
 *   compensation proof against their canonical documents, cleanup jobs with
 *   their proof, launch dispatch claims, outbox events;
 * - `listDeletions`: workspace deletions with their progress counts.
 */
import { canonicalJson, parseCanonical } from '../../canonical/canonical-json';
import {
  actorBindingHash,
  cleanupProofHash,
  compensationProofHash,
  domainHash,
  evidenceHash,
  manifestHash,
  payloadHash,
  stepRequestHash,
} from '../../canonical/hash';
import type {
  ActorBindingDocument,
  CompensationProof,
  CreationPlan,
  StepEvidence,
  StepRequest,
} from '../../canonical/types';
import { readRows, type Db } from '../../db/tx';
import type { CompensationState, DispatchState, OperationState, StepKind, StepState } from '../../domain/vocab';
import { DISPATCH_EVIDENCE_DOMAIN } from '../../store/launch-dispatch';
import { chooseRecoveryAction, type RecoveryDecision } from '../../runtime/recovery-action';
import type { Verification } from './html';

type Row = Record<string, unknown>;

/** Whether `stored` is the hash of the canonical document `json` (absent when either is missing). */
export function verify(json: unknown, stored: unknown, hash: (doc: never) => string): Verification {
  if (typeof json !== 'string' || typeof stored !== 'string') return 'absent';
  try {
    return hash(parseCanonical(json) as never) === stored ? 'verified' : 'mismatch';
  } catch {
    return 'mismatch';
  }
}

export async function legalActionNow(db: Db, operationId: string): Promise<RecoveryDecision | null> {
  const ops = await readRows<{ state: OperationState; result_event_id: string | null }>(
    db,
    'SELECT state, result_event_id FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  const op = ops[0];
  if (!op) return null;
  const steps = await readRows<{ kind: StepKind; state: StepState; compensation_state: CompensationState }>(
    db,
    'SELECT kind, state, compensation_state FROM task_creation_steps WHERE operation_id = ? ORDER BY id',
    [operationId],
  );
  const claims = await readRows<{ state: DispatchState; deletion_operation_id: string | null }>(
    db,
    'SELECT state, deletion_operation_id FROM task_launch_dispatch_claims WHERE creation_operation_id = ? ORDER BY id',
    [operationId],
  );
  const d = claims[0];
  return chooseRecoveryAction({
    operationState: op.state,
    steps: steps.map((s) => ({ kind: s.kind, state: s.state, compensationState: s.compensation_state })),
    releaseUnfinished: op.state === 'preparing-release',
    phaseBCommitted: op.result_event_id !== null,
    // Without an observation there is no dispatch proof: the reaper's dispatch pass observes and decides.
    dispatch: d ? { state: d.state, deletionFence: d.deletion_operation_id !== null, proof: null } : null,
  });
}

export interface OperationExtras {
  manifest: Verification;
  actor: Verification;
  steps: Map<string, { request: Verification; evidence: Verification; compensation: Verification }>;
  cleanupJobs: (Row & { proofVerification: Verification; proof: unknown })[];
  dispatchClaims: (Row & { evidenceVerification: Verification; evidence: unknown })[];
  events: (Row & { payloadVerification: Verification })[];
}

function parsed(json: unknown): unknown {
  if (typeof json !== 'string') return null;
  try {
    return parseCanonical(json);
  } catch {
    return { unparsable_document: json };
  }
}

export async function operationExtras(db: Db, operationId: string): Promise<OperationExtras | null> {
  const ops = await readRows<Row>(
    db,
    'SELECT plan_json, manifest_hash, actor_json, actor_binding_hash FROM task_creation_operations WHERE id = ?',
    [operationId],
  );
  const op = ops[0];
  if (!op) return null;
  const stepRows = await readRows<Row>(
    db,
    `SELECT id, request_json, request_sha256, evidence_json, evidence_sha256, compensation_evidence_json,
            compensation_evidence_sha256 FROM task_creation_steps WHERE operation_id = ?`,
    [operationId],
  );
  const steps: OperationExtras['steps'] = new Map();
  for (const s of stepRows) {
    steps.set(String(s.id), {
      request: verify(s.request_json, s.request_sha256, (d: StepRequest) => stepRequestHash(d)),
      evidence: verify(s.evidence_json, s.evidence_sha256, (d: StepEvidence) => evidenceHash(d)),
      compensation: verify(s.compensation_evidence_json, s.compensation_evidence_sha256, (d: CompensationProof) =>
        compensationProofHash(d),
      ),
    });
  }
  const cleanup = await readRows<Row>(
    db,
    `SELECT id, step_id, kind, reason, proof_json, proof_sha256, state, generation, attempt, lease_owner,
            lease_expires_at, next_attempt_at, error_code, created_at, finished_at
       FROM task_resource_cleanup_jobs WHERE operation_id = ? ORDER BY created_at, id`,
    [operationId],
  );
  const claims = await readRows<Row>(
    db,
    `SELECT id, session_id, state, generation, attempt, lease_owner, lease_expires_at, runtime_handle, evidence_json,
            evidence_sha256, deletion_operation_id, error_code, created_at, updated_at
       FROM task_launch_dispatch_claims WHERE creation_operation_id = ? ORDER BY created_at, id`,
    [operationId],
  );
  const events = await readRows<Row>(
    db,
    `SELECT seq, event_id, type, revision, payload_json, payload_sha256, created_at, delivered_at, delivery_attempts
       FROM event_outbox WHERE operation_id = ? ORDER BY seq`,
    [operationId],
  );
  return {
    manifest: verify(op.plan_json, op.manifest_hash, (d: CreationPlan) => manifestHash(d)),
    actor: verify(op.actor_json, op.actor_binding_hash, (d: ActorBindingDocument) => actorBindingHash(d)),
    steps,
    cleanupJobs: cleanup.map((c) => ({
      ...c,
      proof: parsed(c.proof_json),
      proofVerification: verify(c.proof_json, c.proof_sha256, (d: unknown) => cleanupProofHash(d)),
    })),
    dispatchClaims: claims.map((c) => ({
      ...c,
      evidence: parsed(c.evidence_json),
      evidenceVerification: verify(c.evidence_json, c.evidence_sha256, (d: unknown) =>
        domainHash(DISPATCH_EVIDENCE_DOMAIN, canonicalJson(d)),
      ),
    })),
    events: events.map((e) => ({
      ...e,
      payloadVerification: verify(e.payload_json, e.payload_sha256, (d: unknown) => payloadHash(d)),
    })),
  };
}

export async function listDeletions(db: Db, limit: number): Promise<Row[]> {
  return readRows<Row>(
    db,
    `SELECT id, workspace_id, state, requested_by, completed_creations, aborted_creations, deleted_tasks,
            cancelled_launches, transferred_launches, cleanup_jobs, waiting_operations, batches, requested_at,
            updated_at, completed_at
       FROM workspace_deletions ORDER BY requested_at DESC, id DESC LIMIT ${Math.max(1, Math.floor(limit))}`,
  );
}
