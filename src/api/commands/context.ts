/**
 * What a transport-neutral API command receives: the API's dependencies, the
 * authenticated principal (REST: the bearer token's; MCP: the token the
 * session was opened with), and a logger for the best-effort wake-ups that
 * follow a committed write. Commands return plain bodies and throw
 * `TaskLedgerError`/`HttpError`; only the transports (Fastify routes in
 * `../routes`, MCP tools in `src/mcp`) turn those into responses.
 */
import type { Logger } from '../../log';
import type { Principal } from '../../store/types';
import type { ApiDeps } from '../deps';

export interface CommandContext {
  deps: ApiDeps;
  principal: Principal;
  log: Pick<Logger, 'warn'>;
}

/** A command's answer: the REST status it maps to and the JSON body (null for an empty 204). */
export interface CommandResult {
  status: number;
  body: Record<string, unknown> | null;
}

/** The context of a Fastify request on an authenticated route. */
export function requestContext(deps: ApiDeps, principal: Principal, log: Pick<Logger, 'warn'>): CommandContext {
  return { deps, principal, log };
}
