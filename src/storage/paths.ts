/**
 * Where files live under TASKLEDGER_DATA_DIR. Staged uploads belong to the
 * workspace until an `attachment_claim` step moves them to the task.
 */
import { join } from 'node:path';

export function stagedAttachmentPath(dataDir: string, workspaceId: string, attachmentId: string): string {
  return join(dataDir, 'staging', workspaceId, attachmentId);
}

export function claimedAttachmentPath(dataDir: string, taskId: string, attachmentId: string): string {
  return join(dataDir, 'attachments', taskId, attachmentId);
}
