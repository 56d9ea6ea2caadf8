/**
 * Closed schemas of the two binding documents: CreationPlan (steps are a
 * union discriminated by `kind`, each with its exact request schema) and
 * ActorBindingDocument (discriminated by `variant`; auth_mode and
 * authority_kind are the constants the sealed registry `ACTOR_VARIANTS` pairs
 * with that variant). Cross-field rules live in `plan-invariants.ts`.
 */
import type { SchemaObject } from 'ajv';
import { ACTOR_VARIANT_NAMES, ACTOR_VARIANTS, START_POLICIES, STEP_KINDS } from '../../domain/vocab';
import {
  closedObject,
  constant,
  enumOf,
  listOf,
  nullableObject,
  nullableUint,
  nullableUuid,
  sha256,
  snakeName,
  text,
  uint,
  uuid,
} from './fragments';
import { stepKey } from './evidence';
import { STEP_REQUEST_SCHEMAS } from './step-requests';

export const planStepSchema: SchemaObject = {
  type: 'object',
  required: ['kind'],
  properties: { kind: enumOf(STEP_KINDS) },
  discriminator: { propertyName: 'kind' },
  oneOf: STEP_KINDS.map((kind) =>
    closedObject({ kind: constant(kind), step_key: stepKey, request: STEP_REQUEST_SCHEMAS[kind] }),
  ),
};

export const creationPlanSchema = closedObject({
  version: constant(1),
  task_id: uuid,
  workspace_id: uuid,
  workflow_id: nullableUuid,
  workflow_step_id: nullableUuid,
  parent_id: nullableUuid,
  request_sha256: sha256,
  start_policy: enumOf(START_POLICIES),
  deferred_launch: nullableObject({
    session_id: uuid,
    agent_profile_id: uuid,
    executor_id: text(100),
    executor_profile_id: text(100),
    launch_config_sha256: sha256,
  }),
  database_rows: listOf(closedObject({ table: snakeName(64), key: text(255), row_sha256: sha256 })),
  steps: listOf(planStepSchema),
});

export const actorBindingSchema: SchemaObject = {
  type: 'object',
  required: ['variant'],
  properties: { variant: enumOf(ACTOR_VARIANT_NAMES) },
  discriminator: { propertyName: 'variant' },
  oneOf: ACTOR_VARIANT_NAMES.map((variant) =>
    closedObject({
      version: constant(1),
      variant: constant(variant),
      principal_id: text(200),
      workspace_id: uuid,
      auth_mode: constant(ACTOR_VARIANTS[variant].auth_mode),
      authority_kind: constant(ACTOR_VARIANTS[variant].authority_kind),
      authority_id: text(200),
      authority_revision: uint,
      lease_generation: nullableUint,
    }),
  ),
};
