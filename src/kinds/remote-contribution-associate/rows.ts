/**
 * Rows and identities of the `remote_contribution_associate` effect
 * authority, `task_remote_contribution_associations` (tier 15): the one row
 * document every association hash is taken over (claim, evidence,
 * observation, Complete's verifier), the identity key and ownership marker,
 * and the lock-holding readers the Store methods in `remote-contribution.ts`
 * share. Never begins a transaction.
 *
 * Contract:
 * - Identity: (provider, connection, kind, contribution ID), also the step
 *   key and the `key` of observed rows. Its lock key is
 *   SHA-256(`remote-contribution-association/v1` || 0x00 || the four parts
 *   joined by 0x00), taken with `tx.lockKey` at tier 15 before the row.
 * - Ownership marker: domainHash(`kandev/remote-contribution-ownership/v1`,
 *   RFC 8785 {idempotency_key, operation_id, step_id}).
 * - The row document holds every column; `claimed_at` as RFC 3339 UTC ms.
 * - `readTarget`: the connection (same workspace, same provider) and the
 *   repository's `remote_slug`, or why they are unusable (plain reads).
 */
import { canonicalJson } from '../../canonical/canonical-json';
import { domainHash } from '../../canonical/hash';
import type { RemoteContributionAssociateRequest } from '../../canonical/types';
import type { Provider } from '../../domain/vocab';
import type { ContributionRef } from '../../providers/types';
import { TIER } from '../../db/lock-plan';
import type { Tx } from '../../db/tx';
import type { StepClaim, StepRow } from '../../store/types';
import { ownerOf, type ObservedRow } from '../../store/effects/recording';
import { rowHash } from '../../store/effects/row-documents';
import { takeLocks, txReader, type LockNeed, type Reader } from '../../store/effects/row-locks';

type Req = RemoteContributionAssociateRequest;
type Raw = Record<string, unknown>;

export const ASSOCIATION_TABLE = 'task_remote_contribution_associations';
export const OWNERSHIP_MARKER_DOMAIN = 'kandev/remote-contribution-ownership/v1';
export const ASSOCIATION_KEY_DOMAIN = 'remote-contribution-association/v1';
export const LINK_RESPONSE_DOMAIN = 'kandev/remote-contribution-response/v1';

/** The row document every association hash is taken over (claim, evidence, observation, Complete). */
export interface AssociationDoc {
  id: string;
  provider: string;
  connection_id: string;
  contribution_kind: string;
  contribution_id: string;
  task_id: string;
  workspace_id: string;
  repository_id: string;
  operation_id: string;
  step_id: string;
  idempotency_key: string;
  ownership_marker: string;
  provider_handle: string | null;
  /** RFC 3339 UTC with milliseconds. */
  claimed_at: string;
}

export function associationDoc(r: Raw): AssociationDoc {
  return {
    id: String(r.id),
    provider: String(r.provider),
    connection_id: String(r.connection_id),
    contribution_kind: String(r.contribution_kind),
    contribution_id: String(r.contribution_id),
    task_id: String(r.task_id),
    workspace_id: String(r.workspace_id),
    repository_id: String(r.repository_id),
    operation_id: String(r.operation_id),
    step_id: String(r.step_id),
    idempotency_key: String(r.idempotency_key),
    ownership_marker: String(r.ownership_marker),
    provider_handle: typeof r.provider_handle === 'string' ? r.provider_handle : null,
    claimed_at: new Date(r.claimed_at as string | Date).toISOString(),
  };
}

/** The association's identity (equal to the step key): the `key` of its observed rows. */
export function associationIdentity(req: Req): string {
  return `${req.provider}:${req.connection_id}:${req.contribution_kind}:${req.contribution_id}`;
}

export function associationKeyDigest(req: Req): Buffer {
  const parts = [req.provider, req.connection_id, req.contribution_kind, req.contribution_id].join('\u0000');
  return Buffer.from(domainHash(ASSOCIATION_KEY_DOMAIN, parts), 'hex');
}

export function ownershipMarker(operationId: string, stepId: string, idempotencyKey: string): string {
  return domainHash(
    OWNERSHIP_MARKER_DOMAIN,
    canonicalJson({ idempotency_key: idempotencyKey, operation_id: operationId, step_id: stepId }),
  );
}

/** The comment/note text: it carries the marker, so a retry or recovery finds it. */
export function linkCommentBody(taskId: string, marker: string): string {
  return `Linked to taskledger task ${taskId} (marker ${marker})`;
}

/** `provider_response_sha256`: the contribution read and the marker comment, as the provider returned them. */
export function providerResponseSha256(contributionResponseSha256: string, linkResponseSha256: string): string {
  return domainHash(
    LINK_RESPONSE_DOMAIN,
    canonicalJson({
      contribution_response_sha256: contributionResponseSha256,
      link_response_sha256: linkResponseSha256,
    }),
  );
}

/** The columns our own row must have (all but id, handle and claimed_at). */
export function expectedOwn(req: Req, x: StepClaim | StepRow) {
  const owner = ownerOf(x);
  const key = 'stepKey' in x ? x.idempotencyKey : x.idempotency_key;
  return {
    provider: req.provider,
    connection_id: req.connection_id,
    contribution_kind: req.contribution_kind,
    contribution_id: req.contribution_id,
    task_id: req.task_id,
    workspace_id: req.workspace_id,
    repository_id: req.repository_id,
    ...owner,
    idempotency_key: key,
    ownership_marker: ownershipMarker(owner.operation_id, owner.step_id, key),
  };
}

export function isOwn(row: AssociationDoc, expected: ReturnType<typeof expectedOwn>): boolean {
  return (Object.keys(expected) as (keyof typeof expected)[]).every((k) => row[k] === expected[k]);
}

export function observed(req: Req, row: AssociationDoc | null): ObservedRow {
  return { table: ASSOCIATION_TABLE, key: associationIdentity(req), row_sha256: row && rowHash(row) };
}

export const ASSOCIATION_COLUMNS =
  'id, provider, connection_id, contribution_kind, contribution_id, task_id, workspace_id, repository_id, operation_id, step_id, idempotency_key, ownership_marker, provider_handle, claimed_at';
export const BY_IDENTITY = 'provider = ? AND connection_id = ? AND contribution_kind = ? AND contribution_id = ?';
const identityParams = (req: Req) => [req.provider, req.connection_id, req.contribution_kind, req.contribution_id];

export function rowNeed(req: Req, mode: LockNeed['mode']): LockNeed {
  return {
    tier: TIER.CONFIG,
    table: ASSOCIATION_TABLE,
    key: associationIdentity(req),
    where: BY_IDENTITY,
    params: identityParams(req),
    mode,
  };
}

export async function readAssociation(read: Reader, req: Req): Promise<AssociationDoc | null> {
  const rows = await read(
    `SELECT ${ASSOCIATION_COLUMNS} FROM ${ASSOCIATION_TABLE} WHERE ${BY_IDENTITY}`,
    identityParams(req),
  );
  return rows[0] ? associationDoc(rows[0]) : null;
}

/** Tier 15: the identity key, then the row (if any); returns the row. */
export async function lockAssociationLocked(tx: Tx, req: Req, mode: LockNeed['mode']): Promise<AssociationDoc | null> {
  await tx.lockKey(TIER.CONFIG, associationKeyDigest(req));
  await takeLocks(tx, [rowNeed(req, mode)]);
  return readAssociation(txReader(tx), req);
}

/** Where the provider calls go. The token is a secret: never log this object. */
export interface ProviderTarget {
  provider: Provider;
  baseUrl: string;
  token: string;
  remoteSlug: string;
}

/** The provider call's address of the requested contribution at this target. */
export function contributionRef(req: Req, target: ProviderTarget): ContributionRef {
  return {
    provider: req.provider,
    baseUrl: target.baseUrl,
    token: target.token,
    remoteSlug: target.remoteSlug,
    contributionKind: req.contribution_kind,
    contributionId: req.contribution_id,
  };
}

export type TargetResult = { ok: true; target: ProviderTarget } | { ok: false; code: string; message: string };

export async function readTarget(read: Reader, req: Req): Promise<TargetResult> {
  const [conn] = await read<{ provider: string; workspace_id: string; base_url: string; token: string }>(
    'SELECT provider, workspace_id, base_url, token FROM provider_connections WHERE id = ?',
    [req.connection_id],
  );
  if (!conn || String(conn.workspace_id) !== req.workspace_id) {
    return { ok: false, code: 'connection_missing', message: `provider connection ${req.connection_id} is gone` };
  }
  if (conn.provider !== req.provider) {
    return {
      ok: false,
      code: 'connection_provider_mismatch',
      message: `connection ${req.connection_id} is for ${conn.provider}, not ${req.provider}`,
    };
  }
  const [repo] = await read<{ workspace_id: string; remote_slug: string | null }>(
    'SELECT workspace_id, remote_slug FROM repositories WHERE id = ?',
    [req.repository_id],
  );
  if (!repo || String(repo.workspace_id) !== req.workspace_id) {
    return { ok: false, code: 'repository_missing', message: `repository ${req.repository_id} is gone` };
  }
  if (repo.remote_slug === null || repo.remote_slug.trim() === '') {
    return {
      ok: false,
      code: 'remote_slug_missing',
      message: `repository ${req.repository_id} has no remote_slug`,
    };
  }
  return {
    ok: true,
    target: { provider: req.provider, baseUrl: conn.base_url, token: conn.token, remoteSlug: repo.remote_slug },
  };
}
