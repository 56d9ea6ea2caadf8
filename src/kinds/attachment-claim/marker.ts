/**
 * The ownership marker of `attachment_claim`'s copies: one
 * `task_resource_markers` row (kind `attachment_copies`, resource key
 * `attachments:<task_id>`) naming the operation, the step and the task, with
 * `marker_sha256` over the operation, step, idempotency key, request hash
 * (which covers every attachment ID, hash and size) and resource key. It is
 * committed before the step copies any staged file into
 * `<dataDir>/attachments/<task_id>/`, and exists exactly while copies the
 * ledger does not account for may be on disk: the transaction that records
 * the step's outcome deletes it (a success hands ownership of the copies to
 * the claimed rows, which name the operation and step; a failure is recorded
 * only after the step removed its copies), and so does recovery of an
 * `unknown` step once it removed them.
 *
 * PersistAttachmentMarker — locks workspace 1, operation 4.2, task 5.2,
 * identity 6, steps 7 (`lockClaimedLocked`), the marker 14 (FOR UPDATE).
 * Requires a live claim (read-only CAS predicate); inserts the marker unless
 * this step's exact marker is there (an earlier attempt). A foreign row at
 * the key makes the step `unknown` (`conflict`) before any file is touched.
 *
 * ReleaseAttachmentMarker — for recovery, after it removed the copies of an
 * `unknown` step: locks workspace 1, operation 4.2, task 5.2, identity 6,
 * steps 7 (operation authority), the step's attachment rows 14 (shared) and
 * the marker 14 (FOR UPDATE). Deletes the marker only while the operation is
 * `preparing`, the step is still `unknown` at the observed generation (no
 * attempt can copy meanwhile) and no attachment row is claimed by the step;
 * otherwise zero writes and a typed conflict. No event in either.
 */
import { canonicalJson } from '../../canonical/canonical-json';
import { domainHash } from '../../canonical/hash';
import type { AttachmentClaimRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import { ConflictError } from '../../domain/errors';
import { lockClaimedLocked } from '../../store/claimed';
import { guardOperationLocked, lockTaskChainLocked } from '../../store/operation-guard';
import { findStepById, lockStepsLocked } from '../../store/step-rows';
import type { OperationAuthority, StepClaim, StepRow } from '../../store/types';
import {
  assertClaimLiveLocked,
  failWithRowsLocked,
  ownerOf,
  RESOURCE_MARKER_DOMAIN,
  requestOf,
  stepRequestOf,
  type EffectOutcome,
  type ObservedRow,
} from '../../store/effects/recording';
import { markerInsert, readMarker, rowHash, sameRow, type MarkerDoc } from '../../store/effects/row-documents';
import { EFFECT_ROW_UNIQUES, takeLocks, txReader, type LockNeed, type Reader } from '../../store/effects/row-locks';

export const ATTACHMENT_MARKER_KIND = 'attachment_copies';

export type MarkerPresence = 'ours' | 'absent' | 'foreign';

/** The marker's resource key: one attachment claim per creation, one creation per task. */
export const attachmentMarkerKey = (taskId: string): string => `attachments:${taskId}`;

interface StepIds {
  operation_id: string;
  step_id: string;
  idempotency_key: string;
  request_sha256: string;
}

function idsOf(x: StepClaim | StepRow): StepIds {
  return 'stepKey' in x
    ? { ...ownerOf(x), idempotency_key: x.idempotencyKey, request_sha256: x.requestSha256 }
    : { ...ownerOf(x), idempotency_key: x.idempotency_key, request_sha256: x.request_sha256 };
}

/** The exact marker row of this step. */
export function expectedAttachmentMarker(req: AttachmentClaimRequest, x: StepClaim | StepRow): MarkerDoc {
  const ids = idsOf(x);
  const resourceKey = attachmentMarkerKey(req.task_id);
  return {
    resource_key: resourceKey,
    workspace_id: req.workspace_id,
    task_id: req.task_id,
    operation_id: ids.operation_id,
    step_id: ids.step_id,
    kind: ATTACHMENT_MARKER_KIND,
    marker_sha256: domainHash(RESOURCE_MARKER_DOMAIN, canonicalJson({ ...ids, resource_key: resourceKey })),
  };
}

export function attachmentMarkerLock(req: AttachmentClaimRequest, mode: 'update' | 'share'): LockNeed {
  const key = attachmentMarkerKey(req.task_id);
  return { tier: TIER.MARKER, table: 'task_resource_markers', key, where: 'resource_key = ?', params: [key], mode };
}

/** The marker as found (its observed row for evidence) and whether it is this step's. */
export async function readAttachmentMarker(
  read: Reader,
  req: AttachmentClaimRequest,
  x: StepClaim | StepRow,
): Promise<{ presence: MarkerPresence; row: ObservedRow }> {
  const key = attachmentMarkerKey(req.task_id);
  const found = await readMarker(read, key);
  const presence = found === null ? 'absent' : sameRow(found, expectedAttachmentMarker(req, x)) ? 'ours' : 'foreign';
  return { presence, row: { table: 'task_resource_markers', key, row_sha256: found && rowHash(found) } };
}

/** Deletes this step's marker (the caller holds its FOR UPDATE lock and read it as `ours`). */
export async function deleteAttachmentMarkerLocked(tx: Tx, req: AttachmentClaimRequest): Promise<void> {
  const n = await tx.exec('DELETE FROM task_resource_markers WHERE resource_key = ? AND kind = ?', [
    attachmentMarkerKey(req.task_id),
    ATTACHMENT_MARKER_KIND,
  ]);
  if (n !== 1) throw new Error('the attachment marker did not delete exactly once');
}

export async function persistAttachmentMarker(db: Db, claim: StepClaim): Promise<'persisted' | EffectOutcome> {
  const req = requestOf(claim, 'attachment_claim');
  const want = expectedAttachmentMarker(req, claim);
  return runTransaction(
    db,
    'PersistAttachmentMarker',
    async (tx) => {
      const ctx = await lockClaimedLocked(tx, claim);
      await assertClaimLiveLocked(tx, claim);
      await takeLocks(tx, [attachmentMarkerLock(req, 'update')]);
      const marker = await readAttachmentMarker(txReader(tx), req, claim);
      if (marker.presence === 'foreign') {
        return failWithRowsLocked(
          tx,
          ctx,
          claim,
          'ambiguous',
          'foreign_marker',
          "the task's attachment directory is marked by another owner",
          [marker.row],
        );
      }
      if (marker.presence === 'absent') {
        const insert = markerInsert(tx, want);
        await tx.exec(insert.sql, [...insert.params]);
      }
      return 'persisted';
    },
    { restartOnUnique: EFFECT_ROW_UNIQUES },
  );
}

/**
 * Recovery's release of an `unknown` step's marker after it removed the
 * copies: `released`, or `absent` when no marker of this step is there.
 */
export async function releaseAttachmentMarker(
  db: Db,
  auth: OperationAuthority,
  step: StepRow,
): Promise<'released' | 'absent'> {
  const req = stepRequestOf(step, 'attachment_claim');
  return runTransaction(db, 'ReleaseAttachmentMarker', async (tx) => {
    const guarded = await guardOperationLocked(tx, auth, { externalIdKey: false, steps: true });
    if (guarded.op.state !== 'preparing') {
      throw new ConflictError('creation_state_conflict', `operation is ${guarded.op.state}`, {
        operation_id: guarded.op.id,
      });
    }
    await lockTaskChainLocked(tx, guarded.op, { externalIdKey: false, steps: true });
    const now = findStepById(await lockStepsLocked(tx, guarded.op.id), step.id);
    if (now.state !== 'unknown' || now.generation !== step.generation) {
      throw new ConflictError('stale_claim', 'the step moved on since its copies were removed', { step_id: step.id });
    }
    const rowLocks = req.attachments.map((a): LockNeed => ({
      tier: TIER.MARKER,
      table: 'task_message_attachments',
      key: a.attachment_id,
      where: 'id = ?',
      params: [a.attachment_id],
      mode: 'share',
    }));
    await takeLocks(tx, [...rowLocks, attachmentMarkerLock(req, 'update')]);
    const claimed = await tx.rows<{ id: string }>(
      `SELECT id FROM task_message_attachments WHERE claimed_by_step_id = ? AND id IN (${req.attachments.map(() => '?').join(', ')})`,
      [step.id, ...req.attachments.map((a) => a.attachment_id)],
    );
    if (claimed.length > 0) {
      throw new ConflictError('creation_state_conflict', 'an attachment row is claimed by this step', {
        step_id: step.id,
      });
    }
    const marker = await readAttachmentMarker(txReader(tx), req, step);
    if (marker.presence !== 'ours') return 'absent';
    await deleteAttachmentMarkerLocked(tx, req);
    return 'released';
  });
}
