/**
 * Request validation: closed JSON Schemas compiled by our own ajv instances.
 *
 * Fastify's default ajv removes unknown properties (`removeAdditional`) and
 * coerces body types; both would hide bad input. Bodies are validated with no
 * coercion and no removal (an unknown field is a 400 naming it); query strings
 * and path parameters, which are always text, are coerced to the schema type.
 * Errors become 400 `invalid_request` in errors.ts.
 */
import Ajv, { type SchemaObject } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import { TEXT_PATTERN, UUID_PATTERN } from '../canonical/schemas/fragments';

const bodyAjv = new Ajv({ allErrors: false, strict: true, coerceTypes: false, removeAdditional: false });
const textAjv = new Ajv({
  allErrors: false,
  strict: true,
  coerceTypes: true,
  useDefaults: true,
  removeAdditional: false,
});

export const compileValidator: FastifySchemaCompiler<SchemaObject> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? bodyAjv : textAjv).compile(schema);

/** A closed object schema: every listed property allowed, `required` ones required, nothing else. */
export function closed(properties: Record<string, SchemaObject>, required: string[] = []): SchemaObject {
  return { type: 'object', properties, required, additionalProperties: false };
}

export const text = (max: number, min = 1): SchemaObject => ({
  type: 'string',
  minLength: min,
  maxLength: max,
  pattern: TEXT_PATTERN,
});

export const uuid: SchemaObject = { type: 'string', pattern: UUID_PATTERN };
export const name200: SchemaObject = text(200);
