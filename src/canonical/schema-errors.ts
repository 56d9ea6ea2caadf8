/**
 * Turns the first ajv error into a `ValidationError('invalid_document')`.
 *
 * Contract: `field` is a JSON pointer to the offending value — ajv's
 * `instancePath`, extended with the property name for `required`,
 * `additionalProperties` and discriminator errors — and the message says what
 * is wrong in plain words (`unknown field "foo"`, `must be a lowercase RFC 4122
 * UUID`, ...).
 */
import type { ErrorObject } from 'ajv';
import { ValidationError } from '../domain/errors';
import { jsonPointer } from './canonical-json';
import { PATTERN_MESSAGES } from './schemas/fragments';

const TYPE_WORDS: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  object: 'an object',
  array: 'an array',
  null: 'null',
};

function typeWords(type: unknown): string {
  const types = Array.isArray(type) ? type.map(String) : String(type).split(',');
  const words = types.map((t) => TYPE_WORDS[t] ?? t);
  return words.length > 1 ? `${words.slice(0, -1).join(', ')} or ${words[words.length - 1]}` : (words[0] ?? '');
}

/** `{field, message}` for one ajv error. */
export function describeSchemaError(error: ErrorObject): { field: string; message: string } {
  const at = error.instancePath;
  const p = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return {
        field: jsonPointer(at, String(p.missingProperty)),
        message: `missing required field ${JSON.stringify(p.missingProperty)} (absent optionals are null, never omitted)`,
      };
    case 'additionalProperties':
      return {
        field: jsonPointer(at, String(p.additionalProperty)),
        message: `unknown field ${JSON.stringify(p.additionalProperty)}`,
      };
    case 'discriminator':
      return {
        field: jsonPointer(at, String(p.tag)),
        message:
          p.error === 'tag'
            ? `${JSON.stringify(p.tag)} must be a string`
            : `unknown ${String(p.tag)} ${JSON.stringify(p.tagValue)}`,
      };
    case 'type':
      return { field: at, message: `must be ${typeWords(p.type)}` };
    case 'pattern':
      return { field: at, message: PATTERN_MESSAGES[String(p.pattern)] ?? `must match pattern ${String(p.pattern)}` };
    case 'const':
      return { field: at, message: `must be ${JSON.stringify(p.allowedValue)}` };
    case 'enum':
      return {
        field: at,
        message: `must be one of ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`,
      };
    case 'minLength':
      return {
        field: at,
        message: Number(p.limit) === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`,
      };
    case 'maxLength':
      return { field: at, message: `must be at most ${String(p.limit)} characters` };
    case 'minItems':
      return { field: at, message: `must have at least ${String(p.limit)} item(s)` };
    case 'maxItems':
      return { field: at, message: `must have at most ${String(p.limit)} items` };
    case 'minimum':
    case 'maximum':
      return { field: at, message: `must be ${String(p.comparison)} ${String(p.limit)}` };
    default:
      return { field: at, message: error.message ?? `fails ${error.keyword}` };
  }
}

/** A `ValidationError('invalid_document')` whose `detail.document` names the document type. */
export function documentError(field: string, message: string, what: string): ValidationError {
  const err = new ValidationError(field, message, 'invalid_document');
  err.detail.document = what;
  return err;
}

/** The ValidationError for a failed validation (first error; `allErrors` is off). */
export function schemaError(errors: ErrorObject[] | null | undefined, what: string): ValidationError {
  const first = errors?.[0];
  const { field, message } = first === undefined ? { field: '', message: 'is invalid' } : describeSchemaError(first);
  return documentError(field, message, what);
}
