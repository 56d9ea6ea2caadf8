/**
 * How a failed provider call maps onto the ledger's failure classes, for both
 * clients (one table, so GitHub and GitLab can never disagree).
 *
 * Contract — `call` is `read` (GET: no side effect) or `write` (POST/DELETE:
 * may have been applied once the request left this process):
 * - HTTP 429: transient (the provider refused before doing anything).
 * - Other HTTP 4xx (401, 403, 404, 422, ...): permanent — the provider said
 *   no and nothing was created.
 * - HTTP 5xx: transient on a read, ambiguous on a write.
 * - No HTTP answer: connection refused or DNS failure (nothing was sent) is
 *   transient; a timeout or a reset is transient on a read and ambiguous on
 *   a write (the write may have landed before the connection died); a URL
 *   fetch will never send (a bad port) is permanent.
 * Anything that is not recognisably an HTTP status or transport failure is
 * ambiguous: a client bug must never be mistaken for proof of absence.
 */
import { ProviderError } from './types';

export type CallKind = 'read' | 'write';

/** `blocked`: fetch refuses the URL itself (a port on the Fetch standard's bad-port list, e.g. 1): nothing is sent, ever. */
export type TransportFailure = 'refused' | 'timeout' | 'reset' | 'blocked';

/** Error codes (Node, undici) that mean the request never left this process. */
const NOT_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
const TIMEOUT_NAMES = new Set(['TimeoutError', 'AbortError', 'GitbeakerTimeoutError']);

/** Walks an error's `cause` chain and names the transport failure it shows, if any. */
export function transportFailureOf(err: unknown): TransportFailure | null {
  let reset = false;
  for (let e: unknown = err, depth = 0; e && depth < 8; depth++) {
    const o = e as { name?: unknown; code?: unknown; cause?: unknown };
    if (typeof o.name === 'string' && TIMEOUT_NAMES.has(o.name)) return 'timeout';
    if (e instanceof Error && e.message === 'bad port') return 'blocked';
    if (typeof o.code === 'string') {
      if (NOT_SENT_CODES.has(o.code)) return 'refused';
      if (o.code === 'UND_ERR_CONNECT_TIMEOUT') return 'refused';
      if (o.code === 'UND_ERR_HEADERS_TIMEOUT' || o.code === 'UND_ERR_BODY_TIMEOUT') return 'timeout';
      if (o.code.startsWith('UND_ERR_') || o.code === 'ECONNRESET' || o.code === 'EPIPE') reset = true;
    }
    e = o.cause;
  }
  return reset ? 'reset' : null;
}

export function statusFailure(status: number, call: CallKind, what: string, detail: string): ProviderError {
  const message = `${what}: HTTP ${status}${detail ? ` ${detail}` : ''}`.slice(0, 500);
  if (status === 429) return new ProviderError(message, 'transient', status);
  if (status >= 400 && status < 500) return new ProviderError(message, 'permanent', status);
  if (status >= 500) return new ProviderError(message, call === 'read' ? 'transient' : 'ambiguous', status);
  return new ProviderError(message, 'ambiguous', status);
}

const TRANSPORT_TEXT: Record<TransportFailure, string> = {
  refused: 'connection refused',
  timeout: 'timed out',
  reset: 'connection reset',
  blocked: 'fetch refuses this port (Fetch standard bad-port list)',
};

export function transportError(kind: TransportFailure, call: CallKind, what: string): ProviderError {
  const message = `${what}: ${TRANSPORT_TEXT[kind]}`;
  if (kind === 'blocked') return new ProviderError(message, 'permanent', null);
  if (kind === 'refused' || call === 'read') return new ProviderError(message, 'transient', null);
  return new ProviderError(message, 'ambiguous', null);
}

/**
 * Maps whatever a client threw to a ProviderError. `statusOf` extracts the
 * HTTP status when the error carries a provider response (null otherwise).
 */
export function toProviderError(
  err: unknown,
  call: CallKind,
  what: string,
  statusOf: (err: unknown) => { status: number; detail: string } | null,
): ProviderError {
  if (err instanceof ProviderError) return err;
  const http = statusOf(err);
  if (http) return statusFailure(http.status, call, what, http.detail);
  const transport = transportFailureOf(err);
  if (transport) return transportError(transport, call, what);
  const message = err instanceof Error ? err.message : String(err);
  return new ProviderError(`${what}: unexpected failure (${message})`.slice(0, 500), 'ambiguous', null);
}

/** A request the client refuses before sending (malformed slug or ID): the provider cannot ever accept it. */
export function invalidReference(what: string, why: string): ProviderError {
  return new ProviderError(`${what}: ${why}`, 'permanent', null);
}
