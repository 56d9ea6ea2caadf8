/**
 * The `remote_contribution_associate` effect authority:
 * `task_remote_contribution_associations`, one row per provider contribution
 * (UNIQUE provider, connection, kind, contribution ID). Providers have no
 * native idempotency for comments, so the operation-owned row (with its
 * ownership marker) is committed BEFORE any provider call, and every retry or
 * recovery reconciles by that immutable marker (protocol, "Closed step
 * schemas and proof").
 *
 * Locks of every Store method here, in order: workspace 1, operation 4.2,
 * task 5.2, identity 6, steps 7 (`lockClaimedLocked`); then at tier 15 the
 * association identity key (`tx.lockKey`, domain
 * `remote-contribution-association/v1` over provider, connection, kind and
 * contribution ID) and the association row (FOR UPDATE). Connection and
 * repository rows are plain reads. No event.
 *
 * - ClaimContributionAssociation: on a live claim only (else `stale_claim`,
 *   zero writes). A foreign association -> step `failed` (`absent_proven`,
 *   listing the foreign row's hash), foreign row untouched. A missing or
 *   foreign-provider connection or a repository without `remote_slug` ->
 *   `failed` (our own row, if any, deleted). Our own row -> reused. Else
 *   inserts it (`idempotency_key` = the step's, `ownership_marker` = domain
 *   hash of operation, step and key, `provider_handle` NULL). Returns the
 *   provider target (base URL, token, slug) for the I/O that follows.
 * - FailContributionAssociation: deletes only the operation-owned row (by
 *   idempotency key) and records permanent -> `failed` / transient ->
 *   `retry_wait`, with `absent_proven` evidence, in one transaction.
 * - RecordContributionAssociation: stores the provider handle on our row and
 *   records `succeeded` with `present_exact` evidence binding the row hash,
 *   handle, provider response digest, idempotency key and marker.
 * - ReadContributionAssociation: the locked row and target, for observation.
 * The Complete verifier (registered below) re-reads the row and compares its
 * hash and handle with the evidence. Row document, identity key and marker:
 * `remote-contribution-rows.ts`.
 */
import { randomUUID } from 'node:crypto';
import type { RemoteContributionAssociateRequest, StepEvidence } from '../../canonical/types';
import { ConflictError } from '../../domain/errors';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import { lockClaimedLocked } from '../../store/claimed';
import type { StepClaim, StepRow } from '../../store/types';
import {
  assertClaimLiveLocked,
  effectMismatch,
  failWithRowsLocked,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  stepRequestOf,
  type EffectOutcome,
} from '../../store/effects/recording';
import {
  ASSOCIATION_COLUMNS,
  ASSOCIATION_TABLE,
  associationIdentity,
  expectedOwn,
  isOwn,
  lockAssociationLocked,
  observed,
  providerResponseSha256,
  readAssociation,
  readTarget,
  rowNeed,
  type AssociationDoc,
  type ProviderTarget,
  type TargetResult,
} from './rows';
import { rowHash } from '../../store/effects/row-documents';
import { takeLocks, txReader, type LockNeed } from '../../store/effects/row-locks';

export {
  associationDoc,
  contributionRef,
  linkCommentBody,
  observed as observedAssociation,
  ownershipMarker,
  providerResponseSha256,
  type AssociationDoc,
  type ProviderTarget,
} from './rows';

const KIND = 'remote_contribution_associate';
type Req = RemoteContributionAssociateRequest;

async function deleteOwnLocked(tx: Tx, row: AssociationDoc): Promise<void> {
  await tx.exec(`DELETE FROM ${ASSOCIATION_TABLE} WHERE id = ? AND idempotency_key = ?`, [row.id, row.idempotency_key]);
}

export type ContributionClaim =
  | { outcome: 'recorded'; recorded: EffectOutcome }
  | { outcome: 'claimed'; association: AssociationDoc; target: ProviderTarget; reused: boolean };

export async function claimContributionAssociation(db: Db, claim: StepClaim): Promise<ContributionClaim> {
  const req = requestOf(claim, KIND);
  const own = expectedOwn(req, claim);
  return runTransaction(
    db,
    'ClaimContributionAssociation',
    async (tx): Promise<ContributionClaim> => {
      const ctx = await lockClaimedLocked(tx, claim);
      await assertClaimLiveLocked(tx, claim);
      const row = await lockAssociationLocked(tx, req, 'update');
      if (row && !isOwn(row, own)) {
        // Same idempotency key yet different columns: not provably ours, not provably foreign.
        const cls = row.idempotency_key === own.idempotency_key ? 'ambiguous' : 'permanent';
        const message = `contribution ${associationIdentity(req)} is already associated with task ${row.task_id}`;
        const recorded = await failWithRowsLocked(tx, ctx, claim, cls, 'contribution_already_associated', message, [
          observed(req, row),
        ]);
        return { outcome: 'recorded', recorded };
      }
      const target = await readTarget(txReader(tx), req);
      if (!target.ok) {
        if (row) await deleteOwnLocked(tx, row);
        const recorded = await failWithRowsLocked(tx, ctx, claim, 'permanent', target.code, target.message, [
          observed(req, null),
        ]);
        return { outcome: 'recorded', recorded };
      }
      if (row) return { outcome: 'claimed', association: row, target: target.target, reused: true };
      await tx.exec(
        `INSERT INTO ${ASSOCIATION_TABLE} (${ASSOCIATION_COLUMNS})
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ${tx.now})`,
        [
          randomUUID(),
          own.provider,
          own.connection_id,
          own.contribution_kind,
          own.contribution_id,
          own.task_id,
          own.workspace_id,
          own.repository_id,
          own.operation_id,
          own.step_id,
          own.idempotency_key,
          own.ownership_marker,
        ],
      );
      const inserted = await readAssociation(txReader(tx), req);
      if (!inserted || !isOwn(inserted, own)) throw new Error('association row did not read back exactly');
      return { outcome: 'claimed', association: inserted, target: target.target, reused: false };
    },
    { restartOnUnique: ['uq_remote_contribution', 'PRIMARY', 'pk_task_remote_contribution_associations'] },
  );
}

export interface ContributionFailure {
  class: 'permanent' | 'transient';
  code: string;
  message: string;
}

export async function failContributionAssociation(
  db: Db,
  claim: StepClaim,
  failure: ContributionFailure,
): Promise<EffectOutcome> {
  const req = requestOf(claim, KIND);
  const own = expectedOwn(req, claim);
  return runTransaction(db, 'FailContributionAssociation', async (tx) => {
    const ctx = await lockClaimedLocked(tx, claim);
    const row = await lockAssociationLocked(tx, req, 'update');
    const ours = row !== null && isOwn(row, own);
    if (ours && row.provider_handle !== null) {
      throw new ConflictError('creation_state_conflict', 'the association already carries a provider handle', {
        step_id: claim.stepId,
      });
    }
    if (ours) await deleteOwnLocked(tx, row);
    return failWithRowsLocked(tx, ctx, claim, failure.class, failure.code, failure.message, [
      observed(req, ours ? null : row),
    ]);
  });
}

export interface ContributionLink {
  /** Provider ID of the marker comment/note. */
  providerHandle: string;
  /** `LinkHandle.responseSha256` of that comment. */
  responseSha256: string;
  /** The authenticated contribution read (its `responseSha256` is bound too). */
  info: { responseSha256: string };
}

export async function recordContributionAssociation(
  db: Db,
  claim: StepClaim,
  link: ContributionLink,
): Promise<EffectOutcome> {
  const req = requestOf(claim, KIND);
  const own = expectedOwn(req, claim);
  return runTransaction(db, 'RecordContributionAssociation', async (tx) => {
    const ctx = await lockClaimedLocked(tx, claim);
    const row = await lockAssociationLocked(tx, req, 'update');
    if (!row || !isOwn(row, own)) {
      throw new ConflictError('evidence_mismatch', 'the operation-owned association row is gone or foreign', {
        step_id: claim.stepId,
      });
    }
    if (row.provider_handle !== null && row.provider_handle !== link.providerHandle) {
      throw new ConflictError('evidence_mismatch', 'the association already carries another provider handle', {
        step_id: claim.stepId,
      });
    }
    await tx.exec(`UPDATE ${ASSOCIATION_TABLE} SET provider_handle = ? WHERE id = ? AND idempotency_key = ?`, [
      link.providerHandle,
      row.id,
      own.idempotency_key,
    ]);
    const stored = await readAssociation(txReader(tx), req);
    if (!stored || stored.provider_handle !== link.providerHandle) throw new Error('provider handle did not persist');
    const evidence = presentEvidenceOf(claim, {
      association_row_sha256: rowHash(stored),
      provider_handle: link.providerHandle,
      provider_response_sha256: providerResponseSha256(link.info.responseSha256, link.responseSha256),
      idempotency_key: own.idempotency_key,
      ownership_marker: own.ownership_marker,
    });
    return recordSuccessLocked(tx, ctx, claim, evidence, {
      providerHandle: link.providerHandle,
      ownershipMarker: own.ownership_marker,
    });
  });
}

/** What recovery's observation starts from: the locked row, whether it is ours, and where to ask the provider. */
export interface AssociationView {
  request: Req;
  row: AssociationDoc | null;
  own: boolean;
  marker: string;
  target: TargetResult;
}

export async function readContributionAssociation(db: Db, step: StepRow): Promise<AssociationView> {
  const req = stepRequestOf(step, KIND);
  const own = expectedOwn(req, step);
  return runTransaction(db, 'ReadContributionAssociation', async (tx) => {
    const row = await lockAssociationLocked(tx, req, 'share');
    const target = await readTarget(txReader(tx), req);
    return { request: req, row, own: row !== null && isOwn(row, own), marker: own.ownership_marker, target };
  });
}

// ---------------------------------------------------------------- Complete's verifier

export function contributionAssociationLocks(step: StepRow): LockNeed[] {
  return [rowNeed(stepRequestOf(step, KIND), 'share')];
}

export async function verifyContributionAssociationLocked(
  tx: Tx,
  step: StepRow,
  evidence: StepEvidence,
): Promise<void> {
  const req = stepRequestOf(step, KIND);
  await takeLocks(tx, contributionAssociationLocks(step));
  const row = await readAssociation(txReader(tx), req);
  if (!row) throw effectMismatch(step, 'the association row is gone');
  const own = expectedOwn(req, step);
  if (!isOwn(row, own)) throw effectMismatch(step, 'the association row is not the operation-owned row');
  const obs = evidence.observation;
  if (rowHash(row) !== obs.association_row_sha256) {
    throw effectMismatch(step, 'the association row does not hash to the evidence');
  }
  if (obs.idempotency_key !== row.idempotency_key || obs.ownership_marker !== row.ownership_marker) {
    throw effectMismatch(step, 'evidence names another idempotency key or ownership marker');
  }
  // NULL: recovery proved the marker comment present without a handle write; the row hash binds that NULL.
  if (row.provider_handle !== null && row.provider_handle !== obs.provider_handle) {
    throw effectMismatch(step, 'the association row carries another provider handle');
  }
}
