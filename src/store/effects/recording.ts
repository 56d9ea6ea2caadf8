/**
 * Lock-holding helpers every effect Store method uses to build its evidence
 * and record its outcome through the claim's compare-and-set, inside the same
 * transaction that wrote (or proved absent) the effect rows. None begins a
 * transaction or takes a lock.
 *
 * Contract:
 * - `presentEvidenceOf` / `rowSetEvidenceOf` build closed StepEvidence for a
 *   step and validate it against its schema and envelope before returning.
 * - `recordSuccessLocked`: `running -> succeeded` (`armed` for a launch
 *   intent) with `present_exact` evidence; a success that lands after another
 *   step failed permanently is marked `compensation_state = required` in the
 *   same transaction (as `completeTaskCreationStep` does).
 * - `recordFailureLocked`: permanent -> `failed`, transient -> `retry_wait`
 *   (both need `absent_proven` evidence), ambiguous -> `unknown`; a permanent
 *   failure marks succeeded effects for compensation (as
 *   `failTaskCreationStep` does).
 * - `assertClaimLiveLocked`: the claim CAS predicate without a write.
 * - `resourceMarkerSha256`: the ownership-marker hash of a resource key.
 */
import { canonicalJson } from '../../canonical/canonical-json';
import { domainHash, evidenceHash, rowHash } from '../../canonical/hash';
import { compareCanonicalKeys } from '../../canonical/sorted-lists';
import type { StepEvidence, StepFailure, StepRequestByKind } from '../../canonical/types';
import { validateStepEvidence, validateStepFailure } from '../../canonical/validate';
import { recordedEvidence } from '../evidence-memo';
import { ConflictError, ValidationError } from '../../domain/errors';
import type { StepKind, StepState } from '../../domain/vocab';
import type { Tx } from '../../db/tx';
import { casFromRunning, claimLivePredicate, type ClaimContext } from '../claimed';
import { parsedStepRequest, requireCompensationLocked } from '../step-rows';
import { retryDelayMs } from '../step-results';
import type { StepClaim, StepRow } from '../types';

export const RESOURCE_MARKER_DOMAIN = 'kandev/task-resource-marker/v1';

/** What an effect Store method recorded (or, for an observer, what it saw). */
export interface EffectOutcome {
  state: StepState;
  evidence: StepEvidence;
  /** Failure code when the step did not succeed. */
  code: string | null;
}

/** A worker's read-only view of one step's effect (mirrors `Observation` in src/kinds/contract.ts). */
export interface EffectObservation {
  effect: 'present_exact' | 'absent_proven' | 'conflict';
  evidence: StepEvidence;
}

export interface ObservedRow {
  table: string;
  key: string;
  /** `rowHash()` of the row as found; null: proven absent. */
  row_sha256: string | null;
}

/**
 * One of a step's own effect rows as found beside the row expected (`p`), not yet hashed: a success path only asks
 * whether each row is ours, and only a failure records the rows' hashes (`observedRowsOf`). Hashing every row on
 * every check cost a canonicalization and a SHA-256 per row, three to five times per creation.
 */
export interface OwnRow<P extends string = string> {
  table: string;
  key: string;
  /** The row document as read; null: absent. */
  actual: object | null;
  p: P;
}

/** The rows as evidence names them: each one's `rowHash()` as found, null when absent. */
export function observedRowsOf(own: readonly OwnRow[]): ObservedRow[] {
  return own.map((o) => ({ table: o.table, key: o.key, row_sha256: o.actual && rowHash(o.actual) }));
}

interface StepIdentity {
  kind: StepKind;
  step_key: string;
  request_sha256: string;
}

export function identityOf(x: StepClaim | StepRow): StepIdentity {
  return 'stepKey' in x
    ? { kind: x.kind, step_key: x.stepKey, request_sha256: x.requestSha256 }
    : { kind: x.kind, step_key: x.step_key, request_sha256: x.request_sha256 };
}

function observedAt(): string {
  return new Date().toISOString();
}

export function presentEvidenceOf(x: StepClaim | StepRow, observation: Record<string, unknown>): StepEvidence {
  const id = identityOf(x);
  return validateStepEvidence(
    { version: 1, ...id, observation, observed_at: observedAt(), effect: 'present_exact' },
    id,
  );
}

export function rowSetEvidenceOf(
  x: StepClaim | StepRow,
  effect: 'absent_proven' | 'conflict',
  reason: string,
  rows: ObservedRow[],
): StepEvidence {
  const id = identityOf(x);
  const unique = new Map(rows.map((r) => [`${r.table}\u0000${r.key}`, r]));
  const sorted = [...unique.values()].sort((a, b) => compareCanonicalKeys([a.table, a.key], [b.table, b.key]));
  return validateStepEvidence(
    {
      version: 1,
      ...id,
      observation: { reason: reason.slice(0, 200), rows: sorted },
      observed_at: observedAt(),
      effect,
    },
    id,
  );
}

export function resourceMarkerSha256(operationId: string, stepId: string, resourceKey: string): string {
  return domainHash(
    RESOURCE_MARKER_DOMAIN,
    canonicalJson({ operation_id: operationId, resource_key: resourceKey, step_id: stepId }),
  );
}

export interface SuccessExtras {
  providerHandle?: string | null;
  ownershipMarker?: string | null;
}

export async function recordSuccessLocked(
  tx: Tx,
  ctx: ClaimContext,
  claim: StepClaim,
  evidence: StepEvidence,
  extras: SuccessExtras = {},
): Promise<EffectOutcome> {
  const valid = validateStepEvidence(evidence, identityOf(claim));
  if (valid.effect !== 'present_exact') {
    throw new ValidationError('/effect', 'success evidence must prove the effect present_exact', 'invalid_document');
  }
  const to: StepState = claim.kind === 'launch_intent' ? 'armed' : 'succeeded';
  const bytes = recordedEvidence(claim.stepId, identityOf(claim), valid);
  casFromRunning(
    tx,
    claim,
    to,
    ', evidence_json = ?, evidence_sha256 = ?, provider_handle = ?, ownership_marker = ?, error_code = NULL, error_json = NULL',
    [bytes.json, bytes.sha256, extras.providerHandle ?? null, extras.ownershipMarker ?? null],
  );
  if (to === 'succeeded' && ctx.steps.some((s) => s.state === 'failed')) {
    await requireCompensationLocked(tx, [{ ...ctx.step, state: 'succeeded', compensation_state: 'none' }]);
  }
  return { state: to, evidence: valid, code: null };
}

export async function recordFailureLocked(
  tx: Tx,
  ctx: ClaimContext,
  claim: StepClaim,
  failure: StepFailure,
): Promise<EffectOutcome> {
  const valid = validateStepFailure(failure, identityOf(claim));
  if (valid.class === 'transient' && valid.evidence?.effect !== 'absent_proven') {
    throw new ValidationError('/evidence', 'a transient failure needs absent_proven evidence', 'invalid_document');
  }
  if (valid.evidence === null)
    throw new ValidationError('/evidence', 'effect failures carry evidence', 'invalid_document');
  const to: StepState = valid.class === 'permanent' ? 'failed' : valid.class === 'transient' ? 'retry_wait' : 'unknown';
  const errorJson = canonicalJson({ class: valid.class, code: valid.code, message: valid.message });
  casFromRunning(
    tx,
    claim,
    to,
    `, evidence_json = ?, evidence_sha256 = ?, error_code = ?, error_json = ?, next_attempt_at = ${to === 'retry_wait' ? tx.nowPlusMs : 'NULL'}`,
    [
      canonicalJson(valid.evidence),
      evidenceHash(valid.evidence),
      valid.code.slice(0, 64),
      errorJson,
      ...(to === 'retry_wait' ? [retryDelayMs(ctx.step.attempt)] : []),
    ],
  );
  if (to === 'failed') await requireCompensationLocked(tx, ctx.steps);
  return { state: to, evidence: valid.evidence, code: valid.code };
}

/** Builds and records a failure whose evidence is a row set. */
export async function failWithRowsLocked(
  tx: Tx,
  ctx: ClaimContext,
  claim: StepClaim,
  cls: StepFailure['class'],
  code: string,
  message: string,
  rows: ObservedRow[],
): Promise<EffectOutcome> {
  const effect = cls === 'ambiguous' ? 'conflict' : 'absent_proven';
  const evidence = rowSetEvidenceOf(claim, effect, message, rows);
  return recordFailureLocked(tx, ctx, claim, { class: cls, code, message, evidence });
}

/** The claim CAS predicate (running, same generation and owner, lease alive by the database clock), read-only. */
export async function assertClaimLiveLocked(tx: Tx, claim: StepClaim): Promise<void> {
  const { where, params } = claimLivePredicate(tx, claim);
  const live = await tx.rows(`SELECT id FROM task_creation_steps WHERE ${where}`, params);
  if (live.length !== 1) {
    throw new ConflictError('stale_claim', 'claim is stale: generation, owner or lease no longer matches', {
      step_id: claim.stepId,
      generation: claim.generation,
    });
  }
}

/** The claim's request, narrowed to its kind (a handler given another kind's claim is a programming error). */
export function requestOf<K extends StepKind>(claim: StepClaim, kind: K): StepRequestByKind[K] {
  if (claim.kind !== kind) throw new Error(`expected a ${kind} claim, got ${claim.kind}`);
  return claim.request as StepRequestByKind[K];
}

/**
 * A stored step's request, validated from its bytes and narrowed to its kind: `parsedStepRequest`, memoised on the
 * kind and the stored text (ADR 0050).
 */
export function stepRequestOf<K extends StepKind>(step: StepRow, kind: K): StepRequestByKind[K] {
  if (step.kind !== kind) throw new Error(`expected a ${kind} step, got ${step.kind}`);
  return parsedStepRequest(step) as StepRequestByKind[K];
}

/** The owner columns every effect row of a step carries. */
export interface EffectOwner {
  operation_id: string;
  step_id: string;
}

export function ownerOf(x: StepClaim | StepRow): EffectOwner {
  return 'stepKey' in x
    ? { operation_id: x.operationId, step_id: x.stepId }
    : { operation_id: x.operation_id, step_id: x.id };
}

/** Complete's byte-equivalence failure for one step's effect rows. */
export function effectMismatch(step: StepRow, why: string): ConflictError {
  return new ConflictError('evidence_mismatch', `step ${step.kind}/${step.step_key}: ${why}`, { step_id: step.id });
}
