/**
 * The ONLY place where errors become HTTP responses.
 *
 * - `TaskLedgerError` codes (src/domain/errors.ts): invalid_request,
 *   invalid_external_id, invalid_document -> 400 `{error, detail:{field,
 *   message}}`; not_authorized -> 404 `{error:"task not created"}` (the
 *   caller learns nothing else); not_found -> 404; task_identity_reused,
 *   creation_state_conflict, capacity_conflict, task_deleted, workflow_mismatch,
 *   workspace_deleting, observation_disagrees, stale_claim, handle_mismatch, evidence_mismatch -> 409
 *   `{error: code, detail}`; anything else -> 500
 *   `{error:"internal"}`, logged.
 * - database_unavailable, commit_outcome_unknown, and any driver error that
 *   means the connection is gone -> 503 `{error: code, detail}` with
 *   `Retry-After: 1` (src/db/connection-loss.ts): asking again with the same
 *   external ID is safe and answers with the one task.
 * - `HttpError`: refusals that exist only at the HTTP surface (401, 403, 413,
 *   415, an aborted creation's 422).
 * - Fastify's own errors: schema validation and malformed JSON -> 400
 *   `invalid_request` naming the field (JSON pointer); body too large -> 413;
 *   unsupported content type -> 415.
 */
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import type { ErrorObject } from 'ajv';
import { jsonPointer } from '../canonical/canonical-json';
import { PATTERN_MESSAGES } from '../canonical/schemas/fragments';
import { TaskLedgerError, ValidationError, type ErrorCode } from '../domain/errors';
import type { Logger } from '../log';
import { isConnectionLost } from '../db/connection-loss';

/** Why 1 s: the runner already retried a lost connection for about two seconds; a second later the database is usually back. */
export const RETRY_AFTER_S = 1;

export interface ErrorBody {
  error: string;
  detail?: unknown;
  [extra: string]: unknown;
}

/** A refusal decided by the HTTP layer itself (no ledger code exists for it). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.error);
    this.name = 'HttpError';
  }
}

export const unauthorized = (): HttpError => new HttpError(401, { error: 'unauthorized' });
/** A non-operator on an operator-only route; decided from the token alone, before anything is read. */
export const forbidden = (): HttpError =>
  new HttpError(403, { error: 'forbidden', detail: { message: 'this route needs an operator token' } });
export const notFound = (what: string): HttpError =>
  new HttpError(404, { error: 'not_found', detail: { message: `${what} not found` } });
export const unsupportedMediaType = (wanted: string): HttpError =>
  new HttpError(415, { error: 'unsupported_media_type', detail: { message: `send the body as ${wanted}` } });
export const creationAborted = (operationId: string, cause: string | null): HttpError =>
  new HttpError(422, { error: 'creation_aborted', cause, detail: { operation_id: operationId, cause } });

const BAD_INPUT: ReadonlySet<ErrorCode> = new Set(['invalid_request', 'invalid_external_id', 'invalid_document']);
const CONFLICTS: ReadonlySet<ErrorCode> = new Set([
  'task_identity_reused',
  'creation_state_conflict',
  'capacity_conflict',
  'task_deleted',
  'workflow_mismatch',
  'workspace_deleting',
  'observation_disagrees',
  'stale_claim',
  'handle_mismatch',
  'evidence_mismatch',
]);

/** `ValidationError` messages are prefixed with their field; the body names the field separately. */
function fieldMessage(err: TaskLedgerError): { field: string; message: string } {
  const field =
    err instanceof ValidationError ? err.field || '/' : typeof err.detail.field === 'string' ? err.detail.field : '/';
  const prefix = `${field}: `;
  const message = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
  return { field, message };
}

function ajvField(e: ErrorObject): string {
  const params = e.params as Record<string, unknown>;
  if (e.keyword === 'additionalProperties') return jsonPointer(e.instancePath, String(params.additionalProperty));
  if (e.keyword === 'required') return jsonPointer(e.instancePath, String(params.missingProperty));
  return e.instancePath || '/';
}

function ajvMessage(e: ErrorObject): string {
  if (e.keyword === 'additionalProperties') return 'unknown field';
  if (e.keyword === 'required') return 'is required';
  if (e.keyword === 'pattern') {
    const pattern = String((e.params as Record<string, unknown>).pattern);
    return PATTERN_MESSAGES[pattern] ?? `must match ${pattern}`;
  }
  return e.message ?? 'is invalid';
}

function badRequest(field: string, message: string): { status: number; body: ErrorBody } {
  return { status: 400, body: { error: 'invalid_request', detail: { field, message } } };
}

/** Maps any thrown value to a status and body; logs what it cannot classify. */
export function toHttpResponse(err: unknown, log: Logger): { status: number; body: ErrorBody } {
  if (err instanceof HttpError) return { status: err.status, body: err.body };
  if (err instanceof TaskLedgerError) {
    if (BAD_INPUT.has(err.code)) return { status: 400, body: { error: err.code, detail: fieldMessage(err) } };
    if (err.code === 'not_authorized') return { status: 404, body: { error: 'task not created' } };
    if (err.code === 'not_found') return { status: 404, body: { error: 'not_found', detail: err.detail } };
    if (CONFLICTS.has(err.code)) {
      return { status: 409, body: { error: err.code, detail: { ...err.detail, message: err.message } } };
    }
    if (err.code === 'database_unavailable' || err.code === 'commit_outcome_unknown') {
      return { status: 503, body: { error: err.code, detail: { message: err.message } } };
    }
  }
  if (isConnectionLost(err)) {
    log.warn({ err }, 'database connection lost during an API request');
    return {
      status: 503,
      body: { error: 'database_unavailable', detail: { message: 'the database connection was lost; ask again' } },
    };
  }
  const fe = err as Partial<FastifyError> & { validation?: ErrorObject[]; validationContext?: string };
  if (Array.isArray(fe.validation) && fe.validation[0]) {
    const first = fe.validation[0];
    return badRequest(ajvField(first), ajvMessage(first));
  }
  switch (fe.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return badRequest('/', fe.message ?? 'malformed JSON body');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { status: 413, body: { error: 'payload_too_large', detail: { message: fe.message } } };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return { status: 415, body: { error: 'unsupported_media_type', detail: { message: fe.message } } };
  }
  // Body-parser failures (e.g. a prototype-poisoning key) arrive as 4xx without a code we list.
  if (err instanceof SyntaxError || (typeof fe.statusCode === 'number' && fe.statusCode === 400)) {
    return badRequest('/', fe.message ?? 'malformed request body');
  }
  log.error({ err }, 'unhandled error in API request');
  return { status: 500, body: { error: 'internal' } };
}

export function sendError(reply: FastifyReply, err: unknown, log: Logger): FastifyReply {
  const { status, body } = toHttpResponse(err, log);
  if (status === 503) void reply.header('retry-after', String(RETRY_AFTER_S));
  return reply.status(status).send(body);
}

/** Installs the error and not-found handlers on the root instance (children inherit them). */
export function installErrorHandling(app: FastifyInstance, log: Logger): void {
  app.setErrorHandler(async (err, request, reply) => {
    // A route that reads the token late (auth.ts, ADR 0025) answers an unknown token before anything else: a body
    // or query Fastify refused never reached the handler, so the token is read here (once: the lookup is shared).
    if (request.principalLookup) {
      try {
        await request.principalLookup.lookup();
      } catch (authErr) {
        return sendError(reply, authErr, log);
      }
    }
    return sendError(reply, err, log);
  });
  app.setNotFoundHandler((_request, reply) =>
    reply.status(404).send({ error: 'not_found', detail: { message: 'no such route' } }),
  );
}
