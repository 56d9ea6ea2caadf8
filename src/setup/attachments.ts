/**
 * Staging an uploaded attachment for a later create request.
 *
 * The bytes are written first, outside any transaction: to a temporary file
 * beside the final path, then renamed to `stagedAttachmentPath(dataDir,
 * workspace, id)`, so a reader never sees a partial file. Then one transaction
 * locks the workspace (tier 1, shared) and inserts the row (`owner_kind =
 * 'staging'`, owned by the uploading principal). If that transaction fails the
 * file is removed again; a crash in between leaves only an orphan file with no
 * row, which nothing references.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { TaskLedgerError } from '../domain/errors';
import { readRows, runTransaction, type Db } from '../db/tx';
import { stagedAttachmentPath } from '../storage/paths';
import { lockActiveWorkspaceLocked } from './workspaces';

/** Why 25 MiB: large enough for logs, screenshots and patches; small enough to buffer in one request. */
export const MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024;

export interface StagedAttachment {
  attachment_id: string;
  content_sha256: string;
  size: number;
  storage_path: string;
}

export async function stageAttachment(
  db: Db,
  input: { dataDir: string; workspaceId: string; ownerPrincipalId: string; bytes: Buffer },
): Promise<StagedAttachment> {
  const { dataDir, workspaceId, ownerPrincipalId, bytes } = input;
  // Refuse before touching the disk when the workspace does not exist.
  const ws = await readRows<{ id: string }>(db, "SELECT id FROM workspaces WHERE id = ? AND state = 'active'", [
    workspaceId,
  ]);
  if (!ws[0]) throw new TaskLedgerError('not_found', `workspace ${workspaceId} does not exist`, {});
  const id = randomUUID();
  const path = stagedAttachmentPath(dataDir, workspaceId, id);
  const sha = createHash('sha256').update(bytes).digest('hex');
  await mkdir(dirname(path), { recursive: true });
  const temp = `${path}.${randomUUID()}.tmp`;
  try {
    await writeFile(temp, bytes, { flag: 'wx' });
    await rename(temp, path);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
  try {
    await runTransaction(db, 'StageAttachment', async (tx) => {
      await lockActiveWorkspaceLocked(tx, workspaceId);
      await tx.exec(
        `INSERT INTO task_message_attachments (id, workspace_id, owner_kind, staging_owner_id, content_sha256, size, storage_path, created_at, updated_at)
         VALUES (?, ?, 'staging', ?, ?, ?, ?, ${tx.now}, ${tx.now})`,
        [id, workspaceId, ownerPrincipalId, sha, bytes.length, path],
      );
    });
  } catch (err) {
    await rm(path, { force: true });
    throw err;
  }
  return { attachment_id: id, content_sha256: sha, size: bytes.length, storage_path: path };
}
