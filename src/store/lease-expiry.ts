/**
 * ExpireTaskCreationLeases: a `running` step or compensation whose lease has
 * expired (database clock) becomes `unknown` — never `failed`: only an
 * observation of the real effect may move it on. One transaction per
 * operation. Locks: workspace 1, operation 4.2, task 5.2, identity 6, steps 7.
 * No event. A lease renewed concurrently is not expired (the UPDATE re-checks
 * the expiry under the step lock).
 */
import { runTransaction, readRows, type Db } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { lockStepsLocked } from './step-rows';

export interface ExpiredLeases {
  steps: number;
  compensations: number;
}

/** Operations with at least one expired step or compensation lease (plain read). */
export async function findExpiredLeaseOperations(db: Db, limit = 200, workspaceId?: string): Promise<string[]> {
  const now = db.dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)';
  const rows = await readRows<{ operation_id: string }>(
    db,
    `SELECT DISTINCT operation_id FROM task_creation_steps
      WHERE ((state = 'running' AND lease_expires_at < ${now})
         OR (compensation_state = 'running' AND compensation_lease_expires_at < ${now}))
        ${workspaceId === undefined ? '' : 'AND workspace_id = ?'}
      LIMIT ${Math.max(1, Math.floor(limit))}`,
    workspaceId === undefined ? [] : [workspaceId],
  );
  return rows.map((r) => r.operation_id);
}

export async function expireTaskCreationLeases(db: Db, operationId: string, actor = 'reaper'): Promise<ExpiredLeases> {
  return runTransaction(db, 'ExpireTaskCreationLeases', async (tx) => {
    const { op } = await guardOperationLocked(
      tx,
      { kind: 'operation', operationId, actor },
      { externalIdKey: false, steps: true },
    );
    if (op.state !== 'preparing') return { steps: 0, compensations: 0 };
    await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
    await lockStepsLocked(tx, op.id);
    const steps = await tx.exec(
      `UPDATE task_creation_steps SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL,
              error_code = 'lease_expired', updated_at = ${tx.now}
        WHERE operation_id = ? AND state = 'running' AND lease_expires_at < ${tx.now}`,
      [op.id],
    );
    const compensations = await tx.exec(
      `UPDATE task_creation_steps SET compensation_state = 'unknown', compensation_lease_owner = NULL,
              compensation_lease_expires_at = NULL, updated_at = ${tx.now}
        WHERE operation_id = ? AND compensation_state = 'running' AND compensation_lease_expires_at < ${tx.now}`,
      [op.id],
    );
    return { steps, compensations };
  });
}
