/**
 * Building blocks of the closed JSON Schemas (draft-07 keywords, ajv strict).
 *
 * Contract: every object built here is closed (`additionalProperties: false`)
 * and lists every property as `required` (absent optionals are JSON null);
 * every string is bounded and free of control characters; every pattern has a
 * human message in `PATTERN_MESSAGES`, used when a document is rejected.
 */
import type { SchemaObject } from 'ajv';

/** Lowercase RFC 4122 UUID (versions 1-8, RFC variant). */
export const UUID_PATTERN = '^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$';
export const SHA256_PATTERN = '^[0-9a-f]{64}$';
/** Full Git object ID: 40 hex (SHA-1 repositories) or 64 hex (SHA-256 repositories). */
export const COMMIT_PATTERN = '^[0-9a-f]{40}([0-9a-f]{24})?$';
/** RFC 3339 UTC with exactly millisecond precision, e.g. 2026-12-02T16:03:12.123Z. */
export const TIMESTAMP_PATTERN = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$';
/**
 * A branch name every Git accepts without quoting: `/`-separated components of
 * `[A-Za-z0-9._-]`, no component starting with `.` or `-` or ending with `.` or
 * `.lock`, no `..`, not `HEAD`. Stricter than `git check-ref-format --branch`
 * (no spaces, `@`, non-ASCII) on purpose: the name reaches a shell-free CLI call
 * and a `varchar(255)` column.
 */
export const BRANCH_PATTERN =
  '^(?!HEAD$)(?!.*\\.\\.)(?!.*\\.lock(?:/|$))[A-Za-z0-9_][A-Za-z0-9._-]*(?<!\\.)(?:/[A-Za-z0-9_][A-Za-z0-9._-]*(?<!\\.))*$';
/** Free text and opaque identifiers: no C0 control characters and no DEL. */
export const TEXT_PATTERN = '^[^\\u0000-\\u001f\\u007f]*$';
/** Snake-case machine names: error codes, table names. */
export const SNAKE_PATTERN = '^[a-z][a-z0-9_]*$';

export const PATTERN_MESSAGES: Readonly<Record<string, string>> = {
  [UUID_PATTERN]: 'must be a lowercase RFC 4122 UUID',
  [SHA256_PATTERN]: 'must be a SHA-256 hash (64 lowercase hex characters)',
  [COMMIT_PATTERN]: 'must be a full commit ID (40 or 64 lowercase hex characters)',
  [TIMESTAMP_PATTERN]: 'must be a UTC timestamp with milliseconds (YYYY-MM-DDTHH:MM:SS.sssZ)',
  [BRANCH_PATTERN]: 'must be a safe Git branch name',
  [TEXT_PATTERN]: 'must not contain control characters',
  [SNAKE_PATTERN]: 'must be a snake_case name',
};

/**
 * Largest integer a canonical document may carry: every integer must survive
 * the JSON -> IEEE double -> RFC 8785 round trip exactly.
 */
export const MAX_UINT = Number.MAX_SAFE_INTEGER;
/**
 * Upper bound on any list: far above any real plan (a task has a handful of
 * repositories and attachments) yet keeps a hostile document from costing
 * unbounded validation and hashing work.
 */
export const MAX_LIST = 1000;

export const uuid: SchemaObject = { type: 'string', pattern: UUID_PATTERN };
export const nullableUuid: SchemaObject = { type: ['string', 'null'], pattern: UUID_PATTERN };
export const sha256: SchemaObject = { type: 'string', pattern: SHA256_PATTERN };
export const nullableSha256: SchemaObject = { type: ['string', 'null'], pattern: SHA256_PATTERN };
export const commitId: SchemaObject = { type: 'string', pattern: COMMIT_PATTERN };
export const branchName: SchemaObject = { type: 'string', minLength: 1, maxLength: 255, pattern: BRANCH_PATTERN };
export const timestamp: SchemaObject = { type: 'string', pattern: TIMESTAMP_PATTERN };
export const uint: SchemaObject = { type: 'integer', minimum: 0, maximum: MAX_UINT };
export const nullableUint: SchemaObject = { type: ['integer', 'null'], minimum: 0, maximum: MAX_UINT };
export const snakeName = (maxLength: number): SchemaObject => ({
  type: 'string',
  minLength: 1,
  maxLength,
  pattern: SNAKE_PATTERN,
});

/** A bounded string of 1..maxLength characters without control characters. */
export function text(maxLength: number): SchemaObject {
  return { type: 'string', minLength: 1, maxLength, pattern: TEXT_PATTERN };
}

export function enumOf(values: readonly string[]): SchemaObject {
  return { type: 'string', enum: [...values] };
}

export function constant(value: string | number | boolean): SchemaObject {
  return { type: typeof value === 'number' ? 'integer' : typeof value, const: value };
}

/** A closed object: exactly these properties, all required. */
export function closedObject(properties: Record<string, SchemaObject>): SchemaObject {
  return { type: 'object', additionalProperties: false, required: Object.keys(properties), properties };
}

/**
 * A closed object that must also satisfy cross-field `conditions` (if/then).
 * ajv applies `allOf`/`if` before `properties`, so the closed shape is the first
 * `allOf` entry: a structural error (unknown or missing field, wrong type) is
 * reported before a pairing error. `tags` repeats discriminator properties at
 * the top, where ajv's `discriminator` looks for them.
 */
export function conditionalObject(
  properties: Record<string, SchemaObject>,
  conditions: SchemaObject[],
  tags: readonly string[] = [],
): SchemaObject {
  const tagged = Object.fromEntries(tags.map((t) => [t, properties[t] as SchemaObject]));
  return {
    type: 'object',
    ...(tags.length > 0 ? { required: [...tags], properties: tagged } : {}),
    allOf: [closedObject(properties), ...conditions],
  };
}

/** `null` or a closed object with exactly these properties. */
export function nullableObject(properties: Record<string, SchemaObject>): SchemaObject {
  return { ...closedObject(properties), type: ['object', 'null'] };
}

/** A bounded list; sortedness and uniqueness are asserted after validation (`sorted-lists.ts`). */
export function listOf(items: SchemaObject, minItems = 0): SchemaObject {
  return { type: 'array', items, minItems, maxItems: MAX_LIST };
}
