/**
 * The closed ajv schema of the create request body (design/API.md, `POST /tasks`)
 * and the translation of ajv errors into `ValidationError(<JSON pointer>, ...)`.
 *
 * Contract: every object is closed (`additionalProperties: false`); optional
 * fields may be omitted or JSON `null` (so the normalized document of
 * `validatedRequestDocument` validates again); the schema checks structure and
 * formats only (types, UUID shape, enums, list bounds). Semantic rules (trim,
 * lengths in characters/bytes, duplicates, provider/kind pairs) live in
 * `create-request.ts`. `external_id` is left open here: `normalizeExternalId`
 * owns its validation and runs first. `schemaError(raw)` returns the first
 * violation as a `ValidationError` with code `invalid_request`, or `null`.
 */
import Ajv, { type ErrorObject, type SchemaObject } from 'ajv';
import { BRANCH_PATTERN, UUID_PATTERN } from '../canonical/schemas/fragments';
import { ValidationError } from '../domain/errors';
import { CONTRIBUTION_KINDS, PROVIDERS, WORKSPACE_POLICY_MODES } from '../domain/vocab';

/**
 * List bounds. A real task has a handful of blockers, repositories, uploads and
 * linked contributions; the caps are far above that yet keep one request from
 * producing an unbounded plan (every item becomes a row, a step or an edge).
 */
export const MAX_BLOCKERS = 1000;
export const MAX_REPOSITORIES = 64;
export const MAX_ATTACHMENTS = 256;
export const MAX_CONTRIBUTIONS = 64;

const uuid: SchemaObject = { type: 'string', pattern: UUID_PATTERN };
const optionalUuid: SchemaObject = { type: ['string', 'null'], pattern: UUID_PATTERN };
const uuidList = (maxItems: number): SchemaObject => ({ type: 'array', maxItems, items: uuid });

export const createRequestSchema: SchemaObject = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id', 'title'],
  properties: {
    workspace_id: uuid,
    title: { type: 'string' },
    description: { type: ['string', 'null'] },
    external_id: {},
    task_id: optionalUuid,
    workflow_step_id: optionalUuid,
    parent_id: optionalUuid,
    blocked_by: uuidList(MAX_BLOCKERS),
    start_agent: { type: 'boolean' },
    agent_profile_id: optionalUuid,
    repositories: {
      type: 'array',
      maxItems: MAX_REPOSITORIES,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['repository_id'],
        properties: {
          repository_id: uuid,
          base_branch: { type: ['string', 'null'], minLength: 1, maxLength: 255, pattern: BRANCH_PATTERN },
          fresh_branch: { type: 'boolean' },
        },
      },
    },
    attachments: uuidList(MAX_ATTACHMENTS),
    contributions: {
      type: 'array',
      maxItems: MAX_CONTRIBUTIONS,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['provider', 'connection_id', 'repository_id', 'contribution_kind', 'contribution_id'],
        properties: {
          provider: { type: 'string', enum: [...PROVIDERS] },
          connection_id: uuid,
          repository_id: uuid,
          contribution_kind: { type: 'string', enum: [...CONTRIBUTION_KINDS] },
          contribution_id: { type: ['string', 'integer'] },
        },
      },
    },
    workspace_policy: {
      type: ['object', 'null'],
      additionalProperties: false,
      required: ['mode'],
      properties: {
        mode: { type: 'string', enum: [...WORKSPACE_POLICY_MODES] },
        group_id: optionalUuid,
        environment_id: optionalUuid,
      },
    },
  },
};

const ajv = new Ajv({ allErrors: false, strict: true, allowUnionTypes: true, verbose: true });
const validate = ajv.compile(createRequestSchema);

/** Appends one RFC 6901 reference token to a JSON pointer. */
export function pointer(parent: string, token: string | number): string {
  return `${parent}/${String(token).replace(/~/g, '~0').replace(/\//g, '~1')}`;
}

function typeName(t: unknown): string {
  const names: Record<string, string> = {
    string: 'a string',
    integer: 'an integer',
    number: 'a number',
    boolean: 'a boolean',
    object: 'an object',
    array: 'an array',
    null: 'null',
  };
  const list = Array.isArray(t) ? t : String(t).split(',');
  return list.map((x) => names[String(x)] ?? String(x)).join(' or ');
}

function toValidationError(err: ErrorObject): ValidationError {
  const at = err.instancePath;
  const params = err.params as Record<string, unknown>;
  switch (err.keyword) {
    case 'additionalProperties': {
      const name = String(params.additionalProperty);
      return new ValidationError(pointer(at, name), `unknown field "${name}"`);
    }
    case 'required': {
      const name = String(params.missingProperty);
      return new ValidationError(pointer(at, name), `required field "${name}" is missing`);
    }
    case 'type':
      return new ValidationError(at || '/', `must be ${typeName(params.type)}`);
    case 'enum':
      return new ValidationError(
        at,
        `must be one of ${(params.allowedValues as unknown[]).map((v) => `"${String(v)}"`).join(', ')}`,
      );
    case 'pattern': {
      if (params.pattern === UUID_PATTERN) {
        const data = typeof err.data === 'string' ? err.data : '';
        const upper = new RegExp(UUID_PATTERN, 'i').test(data);
        return new ValidationError(
          at,
          upper
            ? 'must be a lowercase RFC 4122 UUID (uppercase hex digits are not accepted)'
            : 'must be a lowercase RFC 4122 UUID',
        );
      }
      return new ValidationError(
        at,
        'must be a safe Git branch name (components of [A-Za-z0-9._-], no "..", not HEAD)',
      );
    }
    case 'maxItems':
      return new ValidationError(at, `must have at most ${String(params.limit)} items`);
    case 'minLength':
    case 'maxLength':
      return new ValidationError(at, `must be 1 to 255 characters long`);
    default:
      return new ValidationError(at || '/', err.message ?? `fails schema keyword ${err.keyword}`);
  }
}

/** The first schema violation of `raw`, or `null` when its structure is valid. */
export function schemaError(raw: unknown): ValidationError | null {
  if (validate(raw)) return null;
  const first = validate.errors?.[0];
  return first ? toValidationError(first) : new ValidationError('/', 'request body is invalid');
}
