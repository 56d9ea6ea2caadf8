/**
 * Bearer-token authentication and the access policy of the REST surface.
 *
 * - `Authorization: Bearer <token>`. The configured admin token (compared in
 *   constant time) is the operator principal `admin`; any other token is
 *   looked up by its SHA-256 (`authenticateToken`): an `operator` role token
 *   covers every workspace, a `member` token exactly one.
 * - Missing, malformed, unknown or revoked token: 401 `{error:"unauthorized"}`.
 * - Operator-only routes refuse any other caller with 403 `forbidden`. The
 *   decision uses the token alone, before anything about the target is read,
 *   so a 403 reveals nothing about any workspace, task or operation.
 * - Workspace-scoped routes open to members answer 404 for a workspace (task,
 *   operation) outside the caller's scope, exactly as for one that does not
 *   exist: the caller cannot tell the two apart.
 * - A route that sets `config: { readTokenWithRequest: true }` (POST /tasks)
 *   still refuses a missing or malformed header at once, but reads a token's
 *   row only when its handler asks (`callerOf`), so Begin reads it together
 *   with the request's references: one round trip (ADR 0025). Begin answers
 *   nothing before that read settled, so the answers are the same.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { UUID_PATTERN } from '../canonical/schemas/fragments';
import type { Db } from '../db/tx';
import { authenticateToken, tokenSha256 } from '../store/actor';
import type { Principal, PrincipalLookup } from '../store/types';
import { forbidden, notFound, unauthorized } from './errors';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on every `/api/v1` route; null only before it ran, or while `principalLookup` is set. */
    principal: Principal | null;
    /** On a `readTokenWithRequest` route: the token's read, left to the handler (`callerOf`). */
    principalLookup: PrincipalLookup | null;
  }
  interface FastifyContextConfig {
    /** The token's row is read by the handler, with its first reads (ADR 0025). */
    readTokenWithRequest?: boolean;
  }
}

export const ADMIN_PRINCIPAL: Readonly<Principal> = Object.freeze({
  variant: 'operator',
  principal_id: 'admin',
  authority_id: 'admin-token',
  authority_revision: 0,
  workspace_id: null,
});

const UUID_RE = new RegExp(UUID_PATTERN);

export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID_RE.test(value);
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** Constant-time comparison (both sides hashed first, so lengths never leak). */
export function tokenEquals(candidate: string, expected: string): boolean {
  return timingSafeEqual(sha256(candidate), sha256(expected));
}

export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return m ? m[1]! : null;
}

/** The principal behind a token, or null when the token is unknown or revoked. */
export async function principalForToken(
  db: Db,
  adminToken: string | null,
  token: string | null,
): Promise<Principal | null> {
  if (token === null || token.length > 512) return null;
  if (adminToken !== null && tokenEquals(token, adminToken)) return { ...ADMIN_PRINCIPAL };
  return authenticateToken(db, token);
}

export function isOperator(principal: Principal): boolean {
  return principal.workspace_id === null;
}

/** Installs the authentication hook on a route scope (every route in it needs a token). */
export function installAuth(scope: FastifyInstance, db: Db, adminToken: string | null): void {
  scope.decorateRequest('principal', null);
  scope.decorateRequest('principalLookup', null);
  scope.addHook('onRequest', async (request) => {
    const token = bearerToken(request.headers.authorization);
    if (request.routeOptions.config.readTokenWithRequest && token !== null && token.length <= 512) {
      if (adminToken === null || !tokenEquals(token, adminToken)) {
        // One read however often it is asked for (Begin, then the error handler).
        let read: Promise<Principal> | null = null;
        request.principalLookup = {
          lookup: () => (read ??= principalOrUnauthorized(db, adminToken, token)),
          tokenSha256: tokenSha256(token),
        };
        return;
      }
    }
    request.principal = await principalOrUnauthorized(db, adminToken, token);
  });
}

async function principalOrUnauthorized(db: Db, adminToken: string | null, token: string | null): Promise<Principal> {
  const principal = await principalForToken(db, adminToken, token);
  if (!principal) throw unauthorized();
  return principal;
}

/** The caller of a `readTokenWithRequest` route: its Principal, or the lookup of its token (rejects with 401). */
export function callerOf(request: FastifyRequest): Principal | PrincipalLookup {
  return request.principalLookup ?? principalOf(request);
}

export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw unauthorized();
  return request.principal;
}

export function requireOperator(request: FastifyRequest): Principal {
  const principal = principalOf(request);
  if (!isOperator(principal)) throw forbidden();
  return principal;
}

/** Route-level `onRequest` hook of operator-only routes: 403 before the body is even read. */
export function operatorOnly(request: FastifyRequest): Promise<void> {
  return new Promise((resolve) => {
    requireOperator(request);
    resolve();
  });
}

/** Route-level `onRequest` hook of workspace routes open to members: 404 before the body is read. */
export function workspaceAccess(request: FastifyRequest<{ Params: { id: string } }>): Promise<void> {
  return new Promise((resolve) => {
    requireWorkspace(request, request.params.id);
    resolve();
  });
}

/**
 * The workspace of a route parameter, when the caller may use it; otherwise the
 * same 404 as for a workspace that does not exist (whether it exists is
 * checked by the caller's next read or write).
 */
export function requireWorkspace(request: FastifyRequest, workspaceId: unknown): string {
  const principal = principalOf(request);
  if (!isUuid(workspaceId)) throw notFound('workspace');
  if (principal.workspace_id !== null && principal.workspace_id !== workspaceId) throw notFound('workspace');
  return workspaceId;
}

/** True when the principal may see rows of this workspace. */
export function mayRead(principal: Principal, workspaceId: string): boolean {
  return principal.workspace_id === null || principal.workspace_id === workspaceId;
}
