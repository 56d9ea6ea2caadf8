/**
 * Undo of `attachment_claim`: the rows go back to their exact staged owner
 * and the task's verified copies are removed.
 *
 * The claim copied each staged file to the task's attachment path and
 * flipped the rows (storage path unchanged: the staged file stays the
 * row's content). So, outside any transaction:
 * 1. every staged file must still hold the planned SHA-256 and size; one
 *    that does not is restored from the task's verified copy (temp file,
 *    re-hash, rename). Neither intact -> transfer (`staged_content_lost`).
 * 2. read the rows: each must be exactly the row this step claimed (hash in
 *    the evidence) or already exactly staged again; otherwise transfer
 *    (rows and files untouched).
 * 3. delete the task's copies (ENOENT is fine: a re-run after a crash).
 * 4. One Store transaction restores the rows (owner_kind `staging`, no task,
 *    no claimer) while they are still exactly the claimed rows, and records
 *    `compensated`; a row changed meanwhile -> transfer, nothing written.
 * File errors -> `retry_wait`.
 */
import { copyFile, rename, rmdir, unlink } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { dirname } from 'node:path';
import type { AttachmentClaimItem, AttachmentClaimRequest } from '../../canonical/types';
import { digestFile, type FileDigest } from './step';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../storage/paths';
import { readOwnedRows, type OwnedRow } from '../../store/effects/compensate-owned-rows';
import { stagedDoc } from './ledger';
import { readAttachment, rowHash } from '../../store/effects/row-documents';
import { dbReader } from '../../store/effects/row-locks';
import type { CompensationClaim } from '../../store/types';
import type { CompensationUndo, EffectDeps } from '../contract';
import { recordPlain, settleRows, successObservation, transferRows, type RowsUndo } from '../../compensation/record';

type Req = AttachmentClaimRequest;

export const fileMatches = (d: FileDigest | null, sha256: string, size: number): boolean =>
  d !== null && d.sha256 === sha256 && d.size === size;

/** Copies `src` over `dst` through a verified temp file; false when the copy does not hash right. */
export async function copyVerified(src: string, dst: string, sha256: string, size: number): Promise<boolean> {
  const tmp = `${dst}.${randomBytes(6).toString('hex')}.restore`;
  try {
    await copyFile(src, tmp);
    if (!fileMatches(await digestFile(tmp), sha256, size)) return false;
    await rename(tmp, dst);
    return true;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

export async function removeFile(path: string): Promise<void> {
  await unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
  await rmdir(dirname(path)).catch(() => undefined);
}

interface AttachmentPlan {
  spec: RowsUndo;
  files: { item: AttachmentClaimItem; staged: string; claimed: string }[];
}

async function planOf(
  deps: EffectDeps,
  claim: CompensationClaim,
  obs: Record<string, unknown>,
): Promise<AttachmentPlan> {
  const req = claim.request as Req;
  const claimedHashes = new Map(
    ((obs.attachments ?? []) as { attachment_id: string; row_sha256: string }[]).map((a) => [
      a.attachment_id,
      a.row_sha256,
    ]),
  );
  const rows: OwnedRow[] = [];
  const files: AttachmentPlan['files'] = [];
  for (const item of req.attachments) {
    const current = await readAttachment(dbReader(deps.db), item.attachment_id);
    rows.push({
      table: 'task_message_attachments',
      key: item.attachment_id,
      row_sha256: claimedHashes.get(item.attachment_id) ?? '0'.repeat(64),
      undone_sha256: rowHash(stagedDoc(req, item, current?.storage_path ?? '')),
    });
    files.push({
      item,
      staged: stagedAttachmentPath(deps.dataDir, req.workspace_id, item.attachment_id),
      claimed: claimedAttachmentPath(deps.dataDir, req.task_id, item.attachment_id),
    });
  }
  const detail = {
    attachments: files.map((f) => ({
      attachment_id: f.item.attachment_id,
      staged_path: f.staged,
      claimed_path: f.claimed,
      content_sha256: f.item.content_sha256,
      size: f.item.size,
    })),
  };
  return { spec: { rows, detail }, files };
}

/** Every staged file intact (restored from the task's copy when needed); the attachment whose content is lost, or null. */
export async function ensureStagedFiles(
  files: { attachment_id: string; staged_path: string; claimed_path: string; content_sha256: string; size: number }[],
): Promise<string | null> {
  for (const f of files) {
    if (fileMatches(await digestFile(f.staged_path), f.content_sha256, f.size)) continue;
    const restored =
      fileMatches(await digestFile(f.claimed_path), f.content_sha256, f.size) &&
      (await copyVerified(f.claimed_path, f.staged_path, f.content_sha256, f.size));
    if (!restored) return f.attachment_id;
  }
  return null;
}

export const undoAttachmentClaim: CompensationUndo = async (deps, claim) => {
  const obs = successObservation(claim);
  if (obs === null) return recordPlain(deps, claim, 'unknown', 'the step has no present_exact evidence of its claim');
  const { spec, files } = await planOf(deps, claim, obs);
  let outcome: { transfer: [string, string] } | { retry: string } | null = null;
  try {
    const lost = await ensureStagedFiles(spec.detail.attachments as Parameters<typeof ensureStagedFiles>[0]);
    if (lost !== null) {
      outcome = { transfer: ['staged_content_lost', `neither the staged file nor the copy of ${lost} is intact`] };
    } else {
      const found = await readOwnedRows(dbReader(deps.db), spec.rows);
      const changed = found.filter((f) => f.presence === 'foreign');
      if (changed.length > 0) {
        outcome = { transfer: ['effect_changed', `attachment ${changed[0]!.row.key} changed since the claim`] };
      } else {
        for (const f of files) await removeFile(f.claimed);
      }
    }
  } catch (err) {
    outcome = { retry: `file: ${(err as Error).message.slice(0, 300)}` };
  }
  if (outcome !== null && 'retry' in outcome) return recordPlain(deps, claim, 'retry_wait', outcome.retry);
  if (outcome !== null) return transferRows(deps, claim, spec, ...outcome.transfer);
  return settleRows(deps, claim, spec);
};
