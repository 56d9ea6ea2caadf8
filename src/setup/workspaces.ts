/**
 * Setup writers for workspaces, and the lock every other setup writer takes
 * first: the workspace row (tier 1, FOR SHARE), which proves the workspace
 * exists and is active and keeps a concurrent deletion out until commit.
 * Each public writer owns exactly one transaction; no I/O runs inside it.
 */
import { randomUUID } from 'node:crypto';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';

export interface WorkspaceRow {
  id: string;
  name: string;
  state: string;
}

/** Locks the workspace row (tier 1, shared); throws not_found or a conflict when it is missing or going away. */
export async function lockActiveWorkspaceLocked(tx: Tx, workspaceId: string): Promise<void> {
  tx.lockRow(TIER.WORKSPACE, 'workspaces', workspaceId);
  const row = await tx.one<{ state: string }>(`SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, [
    workspaceId,
  ]);
  if (!row || row.state === 'deleted') {
    throw new TaskLedgerError('not_found', `workspace ${workspaceId} does not exist`, { workspace_id: workspaceId });
  }
  if (row.state !== 'active') {
    throw new ConflictError('workspace_deleting', `workspace ${workspaceId} is being deleted`, {
      workspace_id: workspaceId,
    });
  }
}

export async function createWorkspace(db: Db, input: { name: string }): Promise<WorkspaceRow> {
  const id = randomUUID();
  await runTransaction(db, 'CreateWorkspace', async (tx) => {
    tx.lockRow(TIER.WORKSPACE, 'workspaces', id);
    await tx.exec(
      `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
      [id, input.name],
    );
  });
  return { id, name: input.name, state: 'active' };
}
