/**
 * Cleanup of a transferred `attachment_claim` effect, from its proof
 * (attachment IDs, staged and claimed paths, content hashes and sizes, and
 * the owned rows with their claimed and staged hashes): restore every
 * staged file (from the task's verified copy when needed), then — only when
 * every row is still exactly the claimed row or already exactly staged —
 * delete the task's copies and restore the rows (in FinishCleanupJob's
 * transaction). Content lost or a row changed -> `unknown`, nothing
 * touched. File errors -> `retry`.
 */
import type { CleanupProof } from '../../compensation/cleanup-proof';
import { ensureStagedFiles, removeFile } from './compensation';
import type { EffectDeps } from '../contract';
import { readOwnedRows } from '../../store/effects/compensate-owned-rows';
import { dbReader } from '../../store/effects/row-locks';
import { retryDecision, rowsDecision, unknownDecision, type CleanupDecision } from '../../cleanup/decision';

type Files = Parameters<typeof ensureStagedFiles>[0];

export async function cleanAttachments(deps: EffectDeps, proof: CleanupProof): Promise<CleanupDecision> {
  const files = (proof.detail as { attachments?: Files }).attachments;
  if (!Array.isArray(files)) return unknownDecision('proof_invalid', 'the attachment proof lists no files');
  try {
    const lost = await ensureStagedFiles(files);
    if (lost !== null) return unknownDecision('staged_content_lost', `the content of ${lost} is lost`);
    const found = await readOwnedRows(dbReader(deps.db), proof.owned_rows);
    const changed = found.find((f) => f.presence === 'foreign');
    if (changed) return unknownDecision('proof_mismatch', `attachment ${changed.row.key} no longer matches the proof`);
    for (const f of files) await removeFile(f.claimed_path);
    return rowsDecision('attachments restored to their staged owners');
  } catch (err) {
    return retryDecision('file_io_error', (err as Error).message.slice(0, 500));
  }
}
