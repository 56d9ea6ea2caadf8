/**
 * ApplyAttachmentClaim: the database half of `attachment_claim` and its
 * success, in one transaction; plus the rows' read-only observation and
 * Complete's verifier. The file copies happen before, outside any
 * transaction (src/steps/attachment-claim.ts), and their outcome is passed in.
 *
 * Locks, in order: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`); every requested `task_message_attachments` row
 * (14, FOR UPDATE, ascending id).
 * States: step `running -> succeeded` when every row is still exactly staged
 * (same workspace, staging owner, content hash and size, unclaimed) and the
 * copies verified: the rows flip to `owner_kind = 'task'`, `task_id`,
 * `claimed_by_operation_id`, `claimed_by_step_id` in the same transaction.
 * Otherwise nothing is written but the step: every row still staged but the
 * content changed (row or file) -> `failed` (`absent_proven`); a transient
 * file error with every row still exactly staged -> `retry_wait`
 * (`absent_proven`); missing, foreign or mixed rows -> `unknown` (`conflict`).
 * Staged files are left in place (removing them is a later cleanup concern).
 * No event.
 */
import { canonicalJson } from '../../canonical/canonical-json';
import type { AttachmentClaimItem, AttachmentClaimRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import { lockClaimedLocked } from '../claimed';
import type { StepClaim, StepRow } from '../types';
import {
  effectMismatch,
  failWithRowsLocked,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectObservation,
  type EffectOutcome,
  type EffectOwner,
  type ObservedRow,
} from './recording';
import { readAttachment, rowHash, sameRow, type AttachmentDoc } from './row-documents';
import { dbReader, takeLocks, txReader, type LockNeed, type Reader } from './row-locks';

/** What the copy phase found, when it could not verify every copy. */
export interface AttachmentFileProblem {
  /** `permanent`: the staged content is gone or changed; `transient`: an I/O error worth retrying. */
  class: 'permanent' | 'transient';
  code: string;
  message: string;
}

type RowState = 'staged' | 'ours' | 'staged_changed' | 'missing' | 'foreign';

/** The exact staged row an attachment is claimed from (and returns to when a claim is undone). */
export function stagedDoc(req: AttachmentClaimRequest, item: AttachmentClaimItem, storagePath: string): AttachmentDoc {
  return {
    id: item.attachment_id,
    workspace_id: req.workspace_id,
    owner_kind: 'staging',
    staging_owner_id: item.staging_owner_id,
    task_id: null,
    claimed_by_operation_id: null,
    claimed_by_step_id: null,
    content_sha256: item.content_sha256,
    size: item.size,
    storage_path: storagePath,
  };
}

/** The exact row a claim by this step leaves behind (storage path unchanged). */
export function claimedDoc(
  req: AttachmentClaimRequest,
  item: AttachmentClaimItem,
  owner: EffectOwner,
  storagePath: string,
): AttachmentDoc {
  return {
    ...stagedDoc(req, item, storagePath),
    owner_kind: 'task',
    task_id: req.task_id,
    claimed_by_operation_id: owner.operation_id,
    claimed_by_step_id: owner.step_id,
  };
}

interface Found {
  item: AttachmentClaimItem;
  row: AttachmentDoc | null;
  state: RowState;
}

function classify(
  req: AttachmentClaimRequest,
  owner: EffectOwner,
  item: AttachmentClaimItem,
  row: AttachmentDoc | null,
): RowState {
  if (row === null) return 'missing';
  if (sameRow(row, stagedDoc(req, item, row.storage_path))) return 'staged';
  if (sameRow(row, claimedDoc(req, item, owner, row.storage_path))) return 'ours';
  const unclaimed = row.owner_kind === 'staging' && row.task_id === null && row.claimed_by_operation_id === null;
  return unclaimed && row.workspace_id === req.workspace_id ? 'staged_changed' : 'foreign';
}

async function readFound(read: Reader, req: AttachmentClaimRequest, owner: EffectOwner): Promise<Found[]> {
  const out: Found[] = [];
  for (const item of req.attachments) {
    const row = await readAttachment(read, item.attachment_id);
    out.push({ item, row, state: classify(req, owner, item, row) });
  }
  return out;
}

function observedRows(found: Found[]): ObservedRow[] {
  return found.map((f) => ({
    table: 'task_message_attachments',
    key: f.item.attachment_id,
    row_sha256: f.row && rowHash(f.row),
  }));
}

function observationOf(req: AttachmentClaimRequest, owner: EffectOwner, found: Found[]) {
  return {
    operation_id: owner.operation_id,
    attachments: found.map((f) => ({
      attachment_id: f.item.attachment_id,
      prior_owner_kind: 'staging',
      staging_owner_id: f.item.staging_owner_id,
      current_owner_kind: 'task',
      task_id: req.task_id,
      content_sha256: f.item.content_sha256,
      size: f.item.size,
      row_sha256: rowHash(claimedDoc(req, f.item, owner, f.row?.storage_path ?? '')),
    })),
  };
}

function lockNeeds(req: AttachmentClaimRequest, mode: 'update' | 'share'): LockNeed[] {
  return req.attachments.map((a) => ({
    tier: TIER.MARKER,
    table: 'task_message_attachments',
    key: a.attachment_id,
    where: 'id = ?',
    params: [a.attachment_id],
    mode,
  }));
}

export async function applyAttachmentClaim(
  db: Db,
  claim: StepClaim,
  fileProblem: AttachmentFileProblem | null,
): Promise<EffectOutcome> {
  const req = requestOf(claim, 'attachment_claim');
  const owner = ownerOf(claim);
  return runTransaction(db, 'ApplyAttachmentClaim', async (tx) => {
    const ctx = await lockClaimedLocked(tx, claim);
    await takeLocks(tx, lockNeeds(req, 'update'));
    const read = txReader(tx);
    const found = await readFound(read, req, owner);
    const rows = observedRows(found);
    const states = new Set(found.map((f) => f.state));
    const only = (...allowed: RowState[]) => [...states].every((s) => allowed.includes(s));
    if (fileProblem !== null) {
      if (only('staged')) {
        return failWithRowsLocked(tx, ctx, claim, fileProblem.class, fileProblem.code, fileProblem.message, rows);
      }
      return failWithRowsLocked(
        tx,
        ctx,
        claim,
        'ambiguous',
        fileProblem.code,
        'copy failed and the rows are no longer exactly staged',
        rows,
      );
    }
    if (only('staged', 'staged_changed') && states.has('staged_changed')) {
      return failWithRowsLocked(
        tx,
        ctx,
        claim,
        'permanent',
        'content_changed',
        'a staged attachment changed since planning',
        rows,
      );
    }
    if (!only('staged', 'ours')) {
      return failWithRowsLocked(
        tx,
        ctx,
        claim,
        'ambiguous',
        'foreign_row',
        'attachment rows are missing, foreign or mixed',
        rows,
      );
    }
    for (const f of found.filter((x) => x.state === 'staged')) {
      await tx.exec(
        `UPDATE task_message_attachments
            SET owner_kind = 'task', task_id = ?, claimed_by_operation_id = ?, claimed_by_step_id = ?, updated_at = ${tx.now}
          WHERE id = ? AND owner_kind = 'staging' AND task_id IS NULL`,
        [req.task_id, owner.operation_id, owner.step_id, f.item.attachment_id],
      );
    }
    const after = await readFound(read, req, owner);
    if (after.some((f) => f.state !== 'ours')) throw new Error('claimed attachment rows did not read back exactly');
    return recordSuccessLocked(tx, ctx, claim, presentEvidenceOf(claim, observationOf(req, owner, after)));
  });
}

/**
 * Read-only, rows only: every row claimed exactly by this step -> present;
 * every row still exactly staged -> absent; else conflict. The caller also
 * checks the claimed files before trusting `present_exact`.
 */
export async function observeAttachmentClaimRows(db: Db, step: StepRow): Promise<EffectObservation> {
  const req = stepRequestOf(step, 'attachment_claim');
  const owner = ownerOf(step);
  const found = await readFound(dbReader(db), req, owner);
  if (found.every((f) => f.state === 'ours')) {
    return { effect: 'present_exact', evidence: presentEvidenceOf(step, observationOf(req, owner, found)) };
  }
  const rows = observedRows(found);
  if (found.every((f) => f.state === 'staged')) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(step, 'absent_proven', 'every attachment is still exactly staged', rows),
    };
  }
  return {
    effect: 'conflict',
    evidence: rowSetEvidenceOf(step, 'conflict', 'attachment rows are missing, foreign, changed or mixed', rows),
  };
}

export function attachmentClaimLocks(step: StepRow): LockNeed[] {
  return lockNeeds(stepRequestOf(step, 'attachment_claim'), 'share');
}

export async function verifyAttachmentClaimLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'attachment_claim');
  const owner = ownerOf(step);
  await takeLocks(tx, attachmentClaimLocks(step));
  const found = await readFound(txReader(tx), req, owner);
  const bad = found.find((f) => f.state !== 'ours');
  if (bad) throw effectMismatch(step, `attachment ${bad.item.attachment_id} is ${bad.state}, not claimed by this step`);
  if (canonicalJson(observationOf(req, owner, found)) !== canonicalJson(evidence.observation)) {
    throw effectMismatch(step, 'evidence does not repeat the claimed rows byte-exactly');
  }
}
