/**
 * Browser sessions of the operator pages (`/admin/*`): no token ever travels
 * in a URL. `POST /admin/login` takes an operator token from a form and sets
 * the HTTP-only, SameSite=Strict cookie `taskledger_admin` holding a session
 * derived from it, never the token itself:
 *
 *   admin token       `a.<expiresMs>.<mac>`
 *   operator API token `t.<token id>.<revision>.<expiresMs>.<mac>`
 *
 * `mac` is HMAC-SHA256 over the other fields under a key derived from the
 * configured admin token (a random per-process key when there is none), so
 * changing the admin token ends every session. An API token's session is
 * re-checked against `api_tokens` on every request: revoking the token, a new
 * revision or a role other than `operator` ends it. Sessions last 12 hours.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { readRows, type Db } from '../../db/tx';
import type { Principal } from '../../store/types';
import { ADMIN_PRINCIPAL } from '../auth';

export const SESSION_COOKIE = 'taskledger_admin';
/** Why 12 h: one working day; logging in again costs a paste. */
export const SESSION_TTL_MS = 12 * 3_600_000;

export interface SessionKeys {
  key: Buffer;
}

export function sessionKeys(adminToken: string | null): SessionKeys {
  const key =
    adminToken === null
      ? randomBytes(32)
      : createHmac('sha256', adminToken).update('taskledger admin session key v1').digest();
  return { key };
}

function mac(keys: SessionKeys, body: string): string {
  return createHmac('sha256', keys.key).update(body).digest('base64url');
}

function macEquals(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The session value for a principal an operator token just authenticated. */
export function issueSession(keys: SessionKeys, principal: Principal, nowMs: number): string {
  const expires = String(nowMs + SESSION_TTL_MS);
  const body =
    principal.variant === 'operator'
      ? `a.${expires}`
      : `t.${principal.authority_id}.${principal.authority_revision}.${expires}`;
  return `${body}.${mac(keys, body)}`;
}

/** The principal of a session cookie value, or null (forged, expired, revoked token, not an operator any more). */
export async function sessionPrincipal(
  db: Db,
  keys: SessionKeys,
  value: string | null,
  nowMs: number,
): Promise<Principal | null> {
  if (value === null || value.length > 400) return null;
  const dot = value.lastIndexOf('.');
  if (dot < 0) return null;
  const body = value.slice(0, dot);
  if (!macEquals(value.slice(dot + 1), mac(keys, body))) return null;
  const parts = body.split('.');
  const expires = Number(parts[parts.length - 1]);
  if (!Number.isFinite(expires) || expires <= nowMs) return null;
  if (parts[0] === 'a' && parts.length === 2) return { ...ADMIN_PRINCIPAL };
  if (parts[0] !== 't' || parts.length !== 4) return null;
  const rows = await readRows<{ principal_id: string; role: string; revision: number | string; revoked_at: unknown }>(
    db,
    'SELECT principal_id, role, revision, revoked_at FROM api_tokens WHERE id = ?',
    [parts[1]!],
  );
  const row = rows[0];
  if (!row || row.revoked_at !== null || row.role !== 'operator' || String(row.revision) !== parts[2]) return null;
  return {
    variant: 'api_principal',
    principal_id: row.principal_id,
    authority_id: parts[1]!,
    authority_revision: Number(row.revision),
    workspace_id: null,
  };
}

export function cookieValue(header: string | undefined, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        return decodeURIComponent(part.slice(eq + 1).trim());
      } catch {
        return null;
      }
    }
  }
  return null;
}

export function sessionCookie(value: string): string {
  return `${SESSION_COOKIE}=${encodeURIComponent(value)}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${SESSION_TTL_MS / 1000}`;
}

export const CLEAR_SESSION_COOKIE = `${SESSION_COOKIE}=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0`;
