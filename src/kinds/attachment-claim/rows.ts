/**
 * The `task_message_attachments` rows of an `attachment_claim` (tier 14):
 * the exact staged and claimed row documents, how each row as found
 * classifies against them, the locks, and the evidence built from them.
 * Reads through any `Reader`; never begins a transaction or writes.
 */
import type { AttachmentClaimItem, AttachmentClaimRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import type { EffectOwner, ObservedRow } from '../../store/effects/recording';
import { readAttachment, rowHash, sameRow, type AttachmentDoc } from '../../store/effects/row-documents';
import type { LockNeed, Reader } from '../../store/effects/row-locks';

export type RowState = 'staged' | 'ours' | 'staged_changed' | 'missing' | 'foreign';

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

export interface Found {
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

export async function readFound(read: Reader, req: AttachmentClaimRequest, owner: EffectOwner): Promise<Found[]> {
  const out: Found[] = [];
  for (const item of req.attachments) {
    const row = await readAttachment(read, item.attachment_id);
    out.push({ item, row, state: classify(req, owner, item, row) });
  }
  return out;
}

export function observedRows(found: Found[]): ObservedRow[] {
  return found.map((f) => ({
    table: 'task_message_attachments',
    key: f.item.attachment_id,
    row_sha256: f.row && rowHash(f.row),
  }));
}

export function observationOf(req: AttachmentClaimRequest, owner: EffectOwner, found: Found[]) {
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

export function lockNeeds(req: AttachmentClaimRequest, mode: 'update' | 'share'): LockNeed[] {
  return req.attachments.map((a) => ({
    tier: TIER.MARKER,
    table: 'task_message_attachments',
    key: a.attachment_id,
    where: 'id = ?',
    params: [a.attachment_id],
    mode,
  }));
}

/** The copies, proven absent (the step removed them). */
export const copiesGone = (req: AttachmentClaimRequest): ObservedRow[] =>
  req.attachments.map((a) => ({ table: 'attachment_files', key: a.attachment_id, row_sha256: null }));
