/**
 * ExpireStagedAttachments: deletes one batch of staged uploads that no
 * creation claimed within the TTL, in one short transaction. The caller
 * unlinks their files only after the commit (src/runtime/staged-expiry.ts):
 * no I/O here.
 *
 * Candidates (plain read, index `ix_task_message_attachments_owner_kind_updated_at`):
 * `owner_kind = 'staging'` rows whose `updated_at` — when the row last
 * became staged: its upload, or a compensation that restored it — is older
 * than `ttlMs` by the database clock, oldest first, at most `limit` (of one
 * workspace, when given).
 * Locks: the candidate rows (14, FOR UPDATE, ascending id); nothing else (no
 * lower tier is needed: the rows themselves are what a claim, a compensation
 * or a cleanup job locks before changing them).
 * Under those locks each row is re-read and kept when it is no longer staged
 * or no longer expired, or when a creation that has not ended (`preparing`,
 * `preparing-release`, `completing`) has an `attachment_claim` step whose
 * request lists it (read after the locks: every Begin committed by then is
 * seen). The rest are deleted. A Begin that read an upload just before it
 * expired and commits after this transaction plans a row that is gone: its
 * claim then fails permanently (`attachment_missing`) and the creation aborts.
 * Returns the deleted rows (id, workspace, storage path), how many were kept
 * and whether the batch was full. No event.
 */
import { parseCanonical } from '../canonical/canonical-json';
import type { AttachmentClaimRequest } from '../canonical/types';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db } from '../db/tx';
import { takeLocks } from './effects/row-locks';

export interface ExpiredAttachment {
  id: string;
  workspace_id: string;
  storage_path: string;
}

export interface StagedExpiryBatch {
  expired: ExpiredAttachment[];
  /** Candidates kept: planned by a creation still running, or no longer staged or expired. */
  kept: number;
  /** The candidate read was full: another batch may find more. */
  full: boolean;
}

/** Why not the shared `nowPlusMs` expression: a TTL of weeks overflows its 32-bit milliseconds on PostgreSQL. */
function cutoffSql(dialect: Db['dialect']): string {
  return dialect === 'postgres'
    ? "clock_timestamp() - (CAST(? AS double precision) * interval '1 millisecond')"
    : 'NOW(3) - INTERVAL (? * 1000) MICROSECOND';
}

const UNFINISHED = "('preparing', 'preparing-release', 'completing')";

export async function expireStagedAttachments(
  db: Db,
  options: { ttlMs: number; limit: number; workspaceId?: string },
): Promise<StagedExpiryBatch> {
  const ttl = Math.max(0, Math.floor(options.ttlMs));
  const limit = Math.max(1, Math.floor(options.limit));
  const scope = options.workspaceId === undefined ? '' : 'AND workspace_id = ?';
  const scopeParams = options.workspaceId === undefined ? [] : [options.workspaceId];
  const candidates = await readRows<{ id: string }>(
    db,
    `SELECT id FROM task_message_attachments
      WHERE owner_kind = 'staging' AND updated_at < ${cutoffSql(db.dialect)} ${scope}
      ORDER BY updated_at, id LIMIT ${limit}`,
    [ttl, ...scopeParams],
  );
  const full = candidates.length === limit;
  if (candidates.length === 0) return { expired: [], kept: 0, full };
  const ids = candidates.map((c) => c.id).sort();
  return runTransaction(db, 'ExpireStagedAttachments', async (tx) => {
    await takeLocks(
      tx,
      ids.map((id) => ({
        tier: TIER.MARKER,
        table: 'task_message_attachments',
        key: id,
        where: 'id = ?',
        params: [id],
        mode: 'update' as const,
      })),
    );
    const marks = ids.map(() => '?').join(', ');
    const still = await tx.rows<ExpiredAttachment>(
      `SELECT id, workspace_id, storage_path FROM task_message_attachments
        WHERE id IN (${marks}) AND owner_kind = 'staging' AND updated_at < ${cutoffSql(tx.dialect)}`,
      [...ids, ttl],
    );
    if (still.length === 0) return { expired: [], kept: ids.length, full };
    const workspaces = [...new Set(still.map((r) => r.workspace_id))].sort();
    const plans = await tx.rows<{ request_json: string }>(
      `SELECT s.request_json FROM task_creation_operations o
         JOIN task_creation_steps s ON s.operation_id = o.id AND s.kind = 'attachment_claim'
        WHERE o.state IN ${UNFINISHED} AND o.workspace_id IN (${workspaces.map(() => '?').join(', ')})`,
      workspaces,
    );
    const planned = new Set(
      plans.flatMap((p) =>
        (parseCanonical(p.request_json) as AttachmentClaimRequest).attachments.map((a) => a.attachment_id),
      ),
    );
    const expired = still.filter((r) => !planned.has(r.id));
    if (expired.length > 0) {
      const n = await tx.exec(
        `DELETE FROM task_message_attachments WHERE id IN (${expired.map(() => '?').join(', ')}) AND owner_kind = 'staging'`,
        expired.map((r) => r.id),
      );
      if (n !== expired.length) throw new Error('expired staged rows did not delete exactly once each');
    }
    return { expired, kept: ids.length - expired.length, full };
  });
}
