/**
 * Typed validators of the canonical documents: one compiled ajv validator per
 * document type (ajv strict mode, first error only), followed by the checks a
 * schema cannot express (list order, cross-field invariants, real timestamps).
 *
 * Contract: each `validateX(value)` returns `value` typed as X when it is a
 * valid closed document, and otherwise throws
 * `ValidationError(<JSON pointer>, <what is wrong>, 'invalid_document')` with
 * `detail.document` naming the document type. Validators never modify, coerce
 * or default their input (no `useDefaults`, `coerceTypes`, `removeAdditional`).
 */
import Ajv, { type SchemaObject, type ValidateFunction } from 'ajv';
import { ValidationError } from '../domain/errors';
import { STEP_KINDS, type StepKind } from '../domain/vocab';
import { jsonPointer } from './canonical-json';
import { checkPlanInvariants, checkStepRequestInvariants } from './plan-invariants';
import { documentError, schemaError } from './schema-errors';
import {
  actorBindingSchema,
  compensationProofSchema,
  creationPlanSchema,
  STEP_REQUEST_SCHEMAS,
  stepEvidenceSchema,
  stepFailureSchema,
} from './schemas';
import { checkObservationLists, checkPlanLists, checkRowSetLists, checkStepRequestLists } from './sorted-lists';
import type {
  ActorBindingDocument,
  CompensationProof,
  CreationPlan,
  Sha256Hex,
  StepEvidence,
  StepFailure,
  StepRequestByKind,
} from './types';

const ajv = new Ajv({
  strict: true,
  allErrors: false,
  // `type: ['string', 'null']` is how the schemas spell a nullable field.
  allowUnionTypes: true,
  // Kind/variant unions report the error of the matching branch, not of every branch.
  discriminator: true,
});

function compile(schema: SchemaObject): ValidateFunction {
  return ajv.compile(schema);
}

const planValidator = compile(creationPlanSchema);
const actorValidator = compile(actorBindingSchema);
const evidenceValidator = compile(stepEvidenceSchema);
const failureValidator = compile(stepFailureSchema);
const compensationValidator = compile(compensationProofSchema);
const requestValidators = Object.fromEntries(
  STEP_KINDS.map((kind) => [kind, compile(STEP_REQUEST_SCHEMAS[kind])]),
) as Record<StepKind, ValidateFunction>;

function run(validator: ValidateFunction, value: unknown, what: string): void {
  if (!validator(value)) throw schemaError(validator.errors, what);
}

/** `observed_at` matched the pattern; also require a real calendar instant. */
function checkTimestamp(value: string, field: string, what: string): void {
  const ms = Date.parse(value);
  if (Number.isNaN(ms) || new Date(ms).toISOString() !== value) {
    throw documentError(field, 'is not a real UTC instant', what);
  }
}

export function validateCreationPlan(value: unknown): CreationPlan {
  run(planValidator, value, 'CreationPlan');
  const plan = value as CreationPlan;
  withDocument('CreationPlan', () => {
    checkPlanLists(plan);
    checkPlanInvariants(plan);
  });
  return plan;
}

export function validateActorBinding(value: unknown): ActorBindingDocument {
  run(actorValidator, value, 'ActorBindingDocument');
  return value as ActorBindingDocument;
}

export function validateStepRequest<K extends StepKind>(kind: K, value: unknown): StepRequestByKind[K] {
  const validator = Object.hasOwn(requestValidators, kind) ? requestValidators[kind] : undefined;
  if (validator === undefined) throw documentError('/kind', `unknown step kind ${JSON.stringify(kind)}`, 'StepRequest');
  run(validator, value, `${kind} request`);
  withDocument(`${kind} request`, () => {
    checkStepRequestLists(kind, value);
    checkStepRequestInvariants(kind, value);
  });
  return value as StepRequestByKind[K];
}

/** The envelope fields a stored step row fixes for its evidence. */
export interface EvidenceExpectation {
  kind: StepKind;
  step_key: string;
  request_sha256: Sha256Hex;
}

function checkEvidence(evidence: StepEvidence, base: string, what: string, expected?: EvidenceExpectation): void {
  checkTimestamp(evidence.observed_at, `${base}/observed_at`, what);
  withDocument(what, () =>
    checkObservationLists(evidence.kind, evidence.effect, evidence.observation, `${base}/observation`),
  );
  checkEnvelope(evidence, base, what, expected);
}

/** The proof names the step it was expected for. */
function checkEnvelope(
  doc: EvidenceExpectation,
  base: string,
  what: string,
  expected: EvidenceExpectation | undefined,
): void {
  if (expected === undefined) return;
  for (const f of ['kind', 'step_key', 'request_sha256'] as const) {
    if (doc[f] !== expected[f]) {
      throw documentError(jsonPointer(base, f), `must be ${JSON.stringify(expected[f])} (the step's ${f})`, what);
    }
  }
}

/** Validates a StepEvidence envelope and, when given, that it belongs to the expected step. */
export function validateStepEvidence(value: unknown, expected?: EvidenceExpectation): StepEvidence {
  run(evidenceValidator, value, 'StepEvidence');
  const evidence = value as StepEvidence;
  checkEvidence(evidence, '', 'StepEvidence', expected);
  return evidence;
}

/**
 * Validates a StepFailure. A `permanent` failure moves the step to `failed`,
 * which requires `absent_proven` evidence; its envelope is checked against
 * `expected` when given.
 */
export function validateStepFailure(value: unknown, expected?: EvidenceExpectation): StepFailure {
  run(failureValidator, value, 'StepFailure');
  const failure = value as StepFailure;
  if (failure.class === 'permanent' && failure.evidence?.effect !== 'absent_proven') {
    throw documentError('/evidence', 'a permanent failure needs absent_proven evidence', 'StepFailure');
  }
  if (failure.evidence !== null) checkEvidence(failure.evidence, '/evidence', 'StepFailure', expected);
  return failure;
}

/** Validates a CompensationProof and, when given, that it belongs to the expected step. */
export function validateCompensationProof(value: unknown, expected?: EvidenceExpectation): CompensationProof {
  run(compensationValidator, value, 'CompensationProof');
  const proof = value as CompensationProof;
  checkTimestamp(proof.observed_at, '/observed_at', 'CompensationProof');
  withDocument('CompensationProof', () => checkRowSetLists(proof.observation, '/observation'));
  checkEnvelope(proof, '', 'CompensationProof', expected);
  return proof;
}

/** Runs post-schema checks, tagging their ValidationError with the document type. */
function withDocument(what: string, checks: () => void): void {
  try {
    checks();
  } catch (err) {
    if (err instanceof ValidationError) err.detail.document ??= what;
    throw err;
  }
}
