/**
 * Workspace deletion (`DELETE /workspaces/:id`), accepted and finished.
 * The cascade in between, one creation per transaction, is
 * store/workspace-deletion-batch.ts (docs/adr/0009-task-lifecycle.md).
 *
 * RequestWorkspaceDeletion — one transaction: the workspace row 1 FOR
 * UPDATE (exclusive: it waits for every transaction holding it shared —
 * Begin, step claims, Complete, launch — and none starts in the workspace
 * until this commits), the deletion row 4 (inserted), its membership
 * barrier 4.1 (inserted). Writes: workspace `active -> deleting`, the
 * deletion `running`, the barrier `active`. From this commit on, creates,
 * step claims, Complete phase A, launches, moves, done and deletions in the
 * workspace are refused. Asking again (running or completed) returns the
 * same deletion and writes nothing. An unknown workspace: `not_found`.
 *
 * FinishWorkspaceDeletion — one transaction: workspace 1 FOR UPDATE, the
 * deletion 4, its barrier 4.1. Only when no creation of the workspace is
 * left to handle (`pendingCreationsLocked` is empty): workspace `deleted`,
 * deletion `completed` (completed_at), barrier `released`. Otherwise it
 * records how many are left (`waiting_operations`) and reports them.
 *
 * readWorkspaceDeletion / findRunningWorkspaceDeletions — plain reads.
 */
import { randomUUID } from 'node:crypto';
import { TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db, type Tx } from '../db/tx';

export interface WorkspaceDeletionView {
  id: string;
  workspace_id: string;
  state: 'running' | 'completed';
  requested_by: string;
  requested_at: Date;
  completed_at: Date | null;
  updated_at: Date;
  batches: number;
  waiting_operations: number;
  counts: {
    completed: number;
    aborted: number;
    deleted_tasks: number;
    cancelled_launches: number;
    transferred_launches: number;
    cleanup_jobs: number;
  };
}

const COLUMNS =
  'id, workspace_id, state, requested_by, requested_at, completed_at, updated_at, batches, waiting_operations, completed_creations, aborted_creations, deleted_tasks, cancelled_launches, transferred_launches, cleanup_jobs';

function viewOf(r: Record<string, unknown>): WorkspaceDeletionView {
  const n = (k: string) => Number(r[k] ?? 0);
  return {
    id: String(r.id),
    workspace_id: String(r.workspace_id),
    state: r.state as 'running' | 'completed',
    requested_by: String(r.requested_by),
    requested_at: r.requested_at as Date,
    completed_at: (r.completed_at as Date | null) ?? null,
    updated_at: r.updated_at as Date,
    batches: n('batches'),
    waiting_operations: n('waiting_operations'),
    counts: {
      completed: n('completed_creations'),
      aborted: n('aborted_creations'),
      deleted_tasks: n('deleted_tasks'),
      cancelled_launches: n('cancelled_launches'),
      transferred_launches: n('transferred_launches'),
      cleanup_jobs: n('cleanup_jobs'),
    },
  };
}

/** Workspace 1 FOR UPDATE: the exclusive fence every other workspace transaction (which takes it shared) waits on. */
export async function lockWorkspaceExclusiveLocked(tx: Tx, workspaceId: string): Promise<string | undefined> {
  tx.lockRow(TIER.WORKSPACE, 'workspaces', workspaceId);
  const ws = await tx.one<{ state: string }>('SELECT state FROM workspaces WHERE id = ? FOR UPDATE', [workspaceId]);
  return ws?.state;
}

export async function lockDeletionLocked(tx: Tx, deletionId: string): Promise<WorkspaceDeletionView | undefined> {
  tx.lockRow(TIER.LIFECYCLE_OPERATION, 'workspace_deletions', deletionId);
  const row = await tx.one(`SELECT ${COLUMNS} FROM workspace_deletions WHERE id = ? FOR UPDATE`, [deletionId]);
  return row && viewOf(row);
}

/**
 * Creations of the workspace the cascade still has to handle, ascending ID
 * (exact under the workspace's exclusive lock): every unfinished one, and
 * every completed one whose task is not deleted yet.
 */
export async function pendingCreationsLocked(
  tx: Tx,
  workspaceId: string,
  options: { after?: string | null; limit: number },
): Promise<string[]> {
  const rows = await tx.rows<{ id: string }>(
    `SELECT o.id FROM task_creation_operations o LEFT JOIN tasks t ON t.id = o.task_id
      WHERE o.workspace_id = ?
        AND (o.state IN ('preparing', 'preparing-release', 'completing')
             OR (o.state = 'completed' AND t.lifecycle_state <> 'deleted'))
        ${options.after ? 'AND o.id > ?' : ''}
      ORDER BY o.id LIMIT ${Math.max(1, Math.floor(options.limit))}`,
    options.after ? [workspaceId, options.after] : [workspaceId],
  );
  return rows.map((r) => r.id);
}

export async function requestWorkspaceDeletion(
  db: Db,
  workspaceId: string,
  requestedBy: string,
): Promise<{ deletion: WorkspaceDeletionView; created: boolean }> {
  return runTransaction(db, 'RequestWorkspaceDeletion', async (tx) => {
    const state = await lockWorkspaceExclusiveLocked(tx, workspaceId);
    if (state === undefined) {
      throw new TaskLedgerError('not_found', `workspace ${workspaceId} does not exist`, { workspace_id: workspaceId });
    }
    const existing = await tx.one<{ id: string }>('SELECT id FROM workspace_deletions WHERE workspace_id = ?', [
      workspaceId,
    ]);
    if (existing) return { deletion: (await lockDeletionLocked(tx, existing.id))!, created: false };
    const id = randomUUID();
    tx.lockRow(TIER.LIFECYCLE_OPERATION, 'workspace_deletions', id);
    await tx.exec(
      `INSERT INTO workspace_deletions (id, workspace_id, state, requested_by, requested_at, updated_at)
       VALUES (?, ?, 'running', ?, ${tx.now}, ${tx.now})`,
      [id, workspaceId, requestedBy.slice(0, 200)],
    );
    tx.lockRow(TIER.BARRIER, 'archive_membership_barriers', `${id}:${workspaceId}`);
    await tx.exec(
      `INSERT INTO archive_membership_barriers (operation_id, scope_workspace_id, kind, state, created_at)
       VALUES (?, ?, 'workspace_deletion', 'active', ${tx.now})`,
      [id, workspaceId],
    );
    await tx.exec(`UPDATE workspaces SET state = 'deleting', updated_at = ${tx.now} WHERE id = ?`, [workspaceId]);
    const row = await tx.one(`SELECT ${COLUMNS} FROM workspace_deletions WHERE id = ?`, [id]);
    return { deletion: viewOf(row!), created: true };
  });
}

export async function finishWorkspaceDeletion(
  db: Db,
  deletionId: string,
): Promise<{ finished: boolean; pending: number }> {
  return runTransaction(db, 'FinishWorkspaceDeletion', async (tx) => {
    const peek = await tx.one<{ workspace_id: string }>('SELECT workspace_id FROM workspace_deletions WHERE id = ?', [
      deletionId,
    ]);
    if (!peek) throw new TaskLedgerError('not_found', `workspace deletion ${deletionId} does not exist`, {});
    await lockWorkspaceExclusiveLocked(tx, peek.workspace_id);
    const deletion = (await lockDeletionLocked(tx, deletionId))!;
    if (deletion.state === 'completed') return { finished: true, pending: 0 };
    const pending = await pendingCreationsLocked(tx, peek.workspace_id, { limit: 1000 });
    if (pending.length > 0) {
      // What is left waits for its steps in flight to settle (the reaper's recovery); shown by GET /workspace-deletions.
      await tx.exec(`UPDATE workspace_deletions SET waiting_operations = ?, updated_at = ${tx.now} WHERE id = ?`, [
        pending.length,
        deletionId,
      ]);
      return { finished: false, pending: pending.length };
    }
    tx.lockRow(TIER.BARRIER, 'archive_membership_barriers', `${deletionId}:${peek.workspace_id}`);
    await tx.exec(
      `UPDATE archive_membership_barriers SET state = 'released', released_at = ${tx.now}
        WHERE operation_id = ? AND scope_workspace_id = ?`,
      [deletionId, peek.workspace_id],
    );
    await tx.exec(`UPDATE workspaces SET state = 'deleted', updated_at = ${tx.now} WHERE id = ?`, [peek.workspace_id]);
    await tx.exec(
      `UPDATE workspace_deletions SET state = 'completed', waiting_operations = 0, completed_at = ${tx.now},
              updated_at = ${tx.now} WHERE id = ?`,
      [deletionId],
    );
    return { finished: true, pending: 0 };
  });
}

export async function readWorkspaceDeletion(db: Db, deletionId: string): Promise<WorkspaceDeletionView | null> {
  const rows = await readRows(db, `SELECT ${COLUMNS} FROM workspace_deletions WHERE id = ?`, [deletionId]);
  return rows[0] ? viewOf(rows[0]) : null;
}

export async function findRunningWorkspaceDeletions(
  db: Db,
  workspaceId?: string,
): Promise<{ id: string; workspace_id: string }[]> {
  return readRows<{ id: string; workspace_id: string }>(
    db,
    `SELECT id, workspace_id FROM workspace_deletions WHERE state = 'running' ${workspaceId ? 'AND workspace_id = ?' : ''}
      ORDER BY requested_at LIMIT 100`,
    workspaceId ? [workspaceId] : [],
  );
}
