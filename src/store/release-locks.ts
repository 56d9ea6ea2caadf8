/**
 * Lock-holding helpers shared by the external-ID release's two Store
 * transactions (store/release-claim.ts, store/release-apply.ts). None of
 * them begins a transaction.
 *
 * The release command's prefix (companion notes §1): workspace 1 (shared);
 * the release row and its holder's creation operation, both tier 4, in
 * ascending UUID order whatever their table (`Tx.lockOperationRow`); the
 * external-ID key 5.1, then the task row 5.2; for a preparing holder its
 * steps 7.
 */
import { ConflictError } from '../domain/errors';
import type { OperationState } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import type { Tx } from '../db/tx';
import { externalIdKeyDigest } from './lock-keys';
import { COMPENSATION_PENDING } from './step-rows';
import type { StepRow } from './types';

export const RELEASES = 'external_id_releases';

export interface HolderOperation {
  id: string;
  state: OperationState;
  release_operation_id: string | null;
  release_generation: number;
}

export interface HolderTask {
  id: string;
  external_id: string | null;
  creation_operation_id: string;
}

/** Locks workspace 1 (shared); false when the workspace is gone. */
export async function lockWorkspaceSharedLocked(tx: Tx, workspaceId: string): Promise<boolean> {
  tx.lockRow(TIER.WORKSPACE, 'workspaces', workspaceId);
  const ws = await tx.one(`SELECT id FROM workspaces WHERE id = ? ${tx.forShare}`, [workspaceId]);
  return ws !== undefined;
}

/**
 * Tier 4: runs `release` (the release row's INSERT, or its FOR UPDATE read)
 * and locks the creation operation, in ascending UUID order. Returns the
 * release step's value and the locked operation (undefined when missing).
 */
export async function lockReleaseAndOperationLocked<R>(
  tx: Tx,
  releaseId: string,
  operationId: string,
  release: () => Promise<R>,
): Promise<{ release: R; op: HolderOperation | undefined }> {
  const lockOp = async (): Promise<HolderOperation | undefined> => {
    tx.lockOperationRow('task_creation_operations', operationId);
    const row = await tx.one<HolderOperation>(
      'SELECT id, state, release_operation_id, release_generation FROM task_creation_operations WHERE id = ? FOR UPDATE',
      [operationId],
    );
    return row && { ...row, release_generation: Number(row.release_generation) };
  };
  const lockRelease = async (): Promise<R> => {
    tx.lockOperationRow(RELEASES, releaseId);
    return release();
  };
  if (releaseId < operationId) {
    const r = await lockRelease();
    return { release: r, op: await lockOp() };
  }
  const op = await lockOp();
  return { release: await lockRelease(), op };
}

/** The external-ID key (5.1), then the holder's task row (5.2, FOR UPDATE). */
export async function lockHolderTaskLocked(
  tx: Tx,
  workspaceId: string,
  externalId: string,
  taskId: string,
): Promise<HolderTask | undefined> {
  await tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(workspaceId, externalId));
  tx.lockRow(TIER.TASK, 'tasks', taskId);
  return tx.one<HolderTask>('SELECT id, external_id, creation_operation_id FROM tasks WHERE id = ? FOR UPDATE', [
    taskId,
  ]);
}

/**
 * The spec's release-claim predicate on locked steps: no step
 * `unknown|running` and no compensation pending (required, running,
 * retry_wait, unknown). Throws `creation_state_conflict` naming the first
 * step in the way.
 */
export function assertReleasable(operationId: string, steps: readonly StepRow[]): void {
  const busy = steps.find(
    (s) => s.state === 'unknown' || s.state === 'running' || COMPENSATION_PENDING.has(s.compensation_state),
  );
  if (busy) {
    throw new ConflictError(
      'creation_state_conflict',
      `step ${busy.kind}/${busy.step_key} is ${busy.state} (compensation ${busy.compensation_state}); release after it settles`,
      { operation_id: operationId, step_id: busy.id },
    );
  }
}

/** Clears the holder's external ID (no revision, no event: the ID is not part of the task's lifecycle). */
export async function clearExternalIdLocked(tx: Tx, taskId: string): Promise<void> {
  await tx.exec(
    `UPDATE tasks SET external_id = NULL, external_id_settled_at = NULL, updated_at = ${tx.now} WHERE id = ?`,
    [taskId],
  );
}
