/**
 * MCP tool results from command outcomes. Success: `{http_status, ...body}`
 * as structured content and as JSON text. Failure: a tool error
 * (`isError: true`) whose body is exactly the REST error body
 * (`src/api/errors.ts` maps it, the one mapping both surfaces share) plus
 * `http_status`, so `error` carries the same stable code.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { ErrorObject } from 'ajv';
import { toHttpResponse } from '../api/errors';
import type { Logger } from '../log';

function result(body: Record<string, unknown>, isError: boolean): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body, isError };
}

export function successResult(status: number, body: Record<string, unknown>): CallToolResult {
  return result({ http_status: status, ...body }, false);
}

export function errorResult(err: unknown, log: Logger): CallToolResult {
  const { status, body } = toHttpResponse(err, log);
  return result({ http_status: status, ...body }, true);
}

/** Arguments refused by the tool's schema: the same 400 `invalid_request` naming the field as over REST. */
export function invalidArguments(errors: ErrorObject[], log: Logger): CallToolResult {
  return errorResult({ validation: errors }, log);
}

export function unknownTool(name: string): CallToolResult {
  return result({ http_status: 404, error: 'not_found', detail: { message: `no tool named ${name}` } }, true);
}
