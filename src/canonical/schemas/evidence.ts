/**
 * Closed schemas of the proof documents a worker records: the StepEvidence
 * envelope (kind-discriminated; `observation` per kind for `present_exact`,
 * the shared row set otherwise), StepFailure, and CompensationProof
 * (`cleanup_job_id` non-null exactly when the outcome is `transferred`).
 */
import type { SchemaObject } from 'ajv';
import { EVIDENCE_EFFECTS, STEP_KINDS, type StepKind } from '../../domain/vocab';
import type { CompensationProof, StepFailure } from '../types';
import {
  closedObject,
  conditionalObject,
  constant,
  enumOf,
  nullableUuid,
  sha256,
  snakeName,
  text,
  timestamp,
  uuid,
} from './fragments';
import { PRESENT_OBSERVATION_SCHEMAS, rowSetObservationSchema } from './observations';

export const FAILURE_CLASSES = [
  'permanent',
  'transient',
  'ambiguous',
] as const satisfies readonly StepFailure['class'][];
export const COMPENSATION_OUTCOMES = [
  'compensated',
  'transferred',
  'unknown',
  'retry_wait',
] as const satisfies readonly CompensationProof['outcome'][];

/** `task_creation_steps.step_key` is `varchar(255)`. */
export const stepKey = text(255);

function evidenceBranch(kind: StepKind): SchemaObject {
  return conditionalObject(
    {
      version: constant(1),
      kind: constant(kind),
      step_key: stepKey,
      request_sha256: sha256,
      observation: { type: 'object' },
      observed_at: timestamp,
      effect: enumOf(EVIDENCE_EFFECTS),
    },
    [
      {
        if: { properties: { effect: { const: 'present_exact' } } },
        then: { properties: { observation: PRESENT_OBSERVATION_SCHEMAS[kind] } },
        else: { properties: { observation: rowSetObservationSchema } },
      },
    ],
    ['kind'],
  );
}

function evidenceSchemaOf(nullable: boolean): SchemaObject {
  return {
    type: nullable ? ['object', 'null'] : 'object',
    required: ['kind'],
    properties: { kind: enumOf(STEP_KINDS) },
    discriminator: { propertyName: 'kind' },
    oneOf: STEP_KINDS.map(evidenceBranch),
  };
}

export const stepEvidenceSchema = evidenceSchemaOf(false);

export const stepFailureSchema = closedObject({
  class: enumOf(FAILURE_CLASSES),
  code: snakeName(64),
  // Free-form diagnostics (may span lines), bounded for the error_json column.
  message: { type: 'string', minLength: 1, maxLength: 2000 },
  evidence: evidenceSchemaOf(true),
});

export const compensationProofSchema = conditionalObject(
  {
    version: constant(1),
    kind: enumOf(STEP_KINDS),
    step_key: stepKey,
    request_sha256: sha256,
    outcome: enumOf(COMPENSATION_OUTCOMES),
    cleanup_job_id: nullableUuid,
    observation: rowSetObservationSchema,
    observed_at: timestamp,
  },
  [
    {
      if: { properties: { outcome: { const: 'transferred' } } },
      then: { properties: { cleanup_job_id: uuid } },
      else: { properties: { cleanup_job_id: { type: 'null' } } },
    },
  ],
);
