/**
 * Actors: from a bearer token to a Principal, from a Principal to the sealed
 * ActorBindingDocument of one creation, and the authority checks that Begin
 * and handle validation repeat under lock.
 */
import { createHash } from 'node:crypto';
import type { ActorBindingDocument } from '../canonical/types';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { ACTOR_VARIANTS } from '../domain/vocab';
import { readRows, type Db, type Tx } from '../db/tx';
import { TIER } from '../db/lock-plan';
import type { Principal } from './types';

export function tokenSha256(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

interface TokenRow {
  id: string;
  workspace_id: string | null;
  principal_id: string;
  role: string;
  revision: number;
  revoked_at: Date | null;
}

const TOKEN_COLUMNS = 'id, workspace_id, principal_id, role, revision, revoked_at';

/** The Principal of a token row, or null when there is none or it is revoked. */
function principalOfRow(row: TokenRow | undefined): Principal | null {
  if (!row || row.revoked_at !== null) return null;
  return {
    variant: 'api_principal',
    principal_id: row.principal_id,
    authority_id: row.id,
    authority_revision: Number(row.revision),
    workspace_id: row.role === 'operator' ? null : row.workspace_id,
  };
}

/** Resolves a bearer token (only its SHA-256 is stored) to a Principal, or null. */
export async function authenticateToken(db: Db, token: string): Promise<Principal | null> {
  const rows = await readRows<TokenRow>(db, `SELECT ${TOKEN_COLUMNS} FROM api_tokens WHERE token_sha256 = ?`, [
    tokenSha256(token),
  ]);
  return principalOfRow(rows[0]);
}

/**
 * Resolves a token by its ID (a producer on the admission queue names its token, never its secret) to a
 * Principal, or null when unknown or revoked. The caller checks the ID's shape first.
 */
export async function principalForTokenId(db: Db, tokenId: string): Promise<Principal | null> {
  const rows = await readRows<TokenRow>(db, `SELECT ${TOKEN_COLUMNS} FROM api_tokens WHERE id = ?`, [tokenId]);
  return principalOfRow(rows[0]);
}

/** True when the principal may act on this workspace (checked before anything is read about it). */
export function mayUseWorkspace(principal: Principal, workspaceId: string): boolean {
  return principal.workspace_id === null || principal.workspace_id === workspaceId;
}

export function actorDocumentFor(principal: Principal, workspaceId: string): ActorBindingDocument {
  const sealed = ACTOR_VARIANTS[principal.variant];
  return {
    version: 1,
    variant: principal.variant,
    principal_id: principal.principal_id,
    workspace_id: workspaceId,
    auth_mode: sealed.auth_mode,
    authority_kind: sealed.authority_kind,
    authority_id: principal.authority_id,
    authority_revision: principal.authority_revision,
    lease_generation: null,
  };
}

/**
 * Locks (tier 1.5, FOR SHARE) and rechecks the authority behind an actor
 * document: an API token must still exist, be unrevoked, have the same
 * revision, and cover the workspace. Trusted in-process variants have no row.
 * Throws `not_authorized` (Begin) or `handle_mismatch` (handle validation).
 */
export async function lockAuthorityLocked(
  tx: Tx,
  doc: ActorBindingDocument,
  onFail: 'not_authorized' | 'handle_mismatch',
): Promise<void> {
  if (doc.variant !== 'api_principal') return;
  tx.lockRow(TIER.AUTHORITY, 'api_tokens', doc.authority_id);
  const row = await tx.one<TokenRow>(
    `SELECT id, workspace_id, principal_id, role, revision, revoked_at FROM api_tokens WHERE id = ? ${tx.forShare}`,
    [doc.authority_id],
  );
  const ok =
    row !== undefined &&
    row.revoked_at === null &&
    Number(row.revision) === doc.authority_revision &&
    row.principal_id === doc.principal_id &&
    (row.role === 'operator' || row.workspace_id === doc.workspace_id);
  if (ok) return;
  if (onFail === 'not_authorized') {
    throw new TaskLedgerError('not_authorized', 'task not created', {});
  }
  throw new ConflictError('handle_mismatch', 'the actor authority behind this handle changed or was revoked', {
    authority_id: doc.authority_id,
  });
}

/**
 * `lockAuthorityLocked`'s lock and check as one statement the server checks (ADR 0028: Begin's one-round-trip
 * attempt): the token row locked (tier 1.5, FOR SHARE) only when it still covers the document, and `mismatch()`
 * when it does not (the caller starts over with `lockAuthorityLocked` for the precise error). No statement for
 * the trusted in-process variants.
 */
export function fenceAuthorityLocked(tx: Tx, doc: ActorBindingDocument, mismatch: () => Error): void {
  if (doc.variant !== 'api_principal') return;
  tx.lockRow(TIER.AUTHORITY, 'api_tokens', doc.authority_id);
  tx.expect(
    {
      sql: `SELECT id FROM api_tokens WHERE id = ? AND revoked_at IS NULL AND revision = ? AND principal_id = ?
        AND (role = 'operator' OR workspace_id = ?) ${tx.forShare}`,
      params: [doc.authority_id, doc.authority_revision, doc.principal_id, doc.workspace_id],
    },
    1,
    mismatch,
  );
}
