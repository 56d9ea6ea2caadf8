/**
 * Creating a shared environment: one `task_environments` row (kind `shared`,
 * no task, no operation) and one `task_environment_repos` row per repository.
 * One transaction: workspace (tier 1, shared), a plain read proving every
 * repository belongs to the workspace (a ValidationError names the first
 * unknown one), then the environment (11.1) and its repository rows (11.2).
 */
import { randomUUID } from 'node:crypto';
import { ValidationError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { lockActiveWorkspaceLocked } from './workspaces';

export interface EnvironmentRow {
  id: string;
  workspace_id: string;
  name: string;
  kind: 'shared';
  repository_ids: string[];
}

export async function createSharedEnvironment(
  db: Db,
  workspaceId: string,
  input: { name: string; repository_ids: string[] },
): Promise<EnvironmentRow> {
  const id = randomUUID();
  const repoIds = [...input.repository_ids];
  await runTransaction(db, 'CreateSharedEnvironment', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    if (repoIds.length > 0) {
      const found = await tx.rows<{ id: string }>(
        `SELECT id FROM repositories WHERE workspace_id = ? AND id IN (${repoIds.map(() => '?').join(', ')})`,
        [workspaceId, ...repoIds],
      );
      const known = new Set(found.map((r) => r.id));
      repoIds.forEach((rid, i) => {
        if (!known.has(rid)) throw new ValidationError(`/repository_ids/${i}`, 'unknown repository in this workspace');
      });
    }
    tx.lockRow(TIER.ENVIRONMENT, 'task_environments', id);
    await tx.exec(
      `INSERT INTO task_environments (id, workspace_id, task_id, kind, operation_id, name, created_at)
       VALUES (?, ?, NULL, 'shared', NULL, ?, ${tx.now})`,
      [id, workspaceId, input.name],
    );
    for (const rid of [...repoIds].sort()) {
      await tx.exec(
        `INSERT INTO task_environment_repos (id, environment_id, workspace_id, repository_id, created_at) VALUES (?, ?, ?, ?, ${tx.now})`,
        [randomUUID(), id, workspaceId, rid],
      );
    }
  });
  return { id, workspace_id: workspaceId, name: input.name, kind: 'shared', repository_ids: repoIds };
}
