/**
 * Identity keys for rows that may not exist yet (companion notes §1): a lock on
 * the key, not on an absent row. The digests are domain-separated SHA-256.
 */
import { lockKeyDigest } from '../canonical/hash';

export function workspaceKeyDigest(workspaceId: string): Buffer {
  return lockKeyDigest('workspace-identity/v1', [workspaceId]);
}

export function externalIdKeyDigest(workspaceId: string, externalId: string): Buffer {
  return lockKeyDigest('task-external-id/v1', [workspaceId, externalId]);
}

export function taskKeyDigest(taskId: string): Buffer {
  return lockKeyDigest('task-id/v1', [taskId]);
}
