/**
 * The JSON Schemas of the API commands' inputs, shared by the REST routes
 * (compiled by Fastify through `../validation.ts`) and the MCP tools (their
 * advertised `inputSchema` and their validation, `src/mcp/tools.ts`): one
 * definition per input, so the two surfaces cannot drift. The create
 * request itself is `createRequestSchema` (src/plan), validated by Begin.
 */
import type { SchemaObject } from 'ajv';
import { OPERATION_STATES } from '../../domain/vocab';
import { closed, uuid } from '../validation';

/** Why 15 s: most creations finish in well under a second; 15 s covers slow Git and provider calls
 *  while staying below common proxy timeouts. 120 s is the most a caller may ask for. */
export const DEFAULT_WAIT_MS = 15_000;
export const MAX_WAIT_MS = 120_000;

export const waitMsSchema: SchemaObject = {
  type: 'integer',
  minimum: 0,
  maximum: MAX_WAIT_MS,
  default: DEFAULT_WAIT_MS,
};

/** `POST /tasks?wait_ms=`. */
export const createQuery = closed({ wait_ms: waitMsSchema });

/** `PATCH /tasks/:id`. */
export const moveBody = closed({ workflow_step_id: uuid }, ['workflow_step_id']);

/** Why 50/200: a page fits one screen of the CLI; 200 bounds one read's cost. */
export const DEFAULT_PAGE = 50;
export const MAX_PAGE = 200;

/** `GET /creation-operations?...`. */
export const listOperationsQuery = closed({
  state: { type: 'string', enum: [...OPERATION_STATES] },
  workspace_id: uuid,
  limit: { type: 'integer', minimum: 1, maximum: MAX_PAGE, default: DEFAULT_PAGE },
  cursor: { type: 'string', minLength: 1, maxLength: 400 },
});
