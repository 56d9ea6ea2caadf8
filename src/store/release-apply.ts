/**
 * ReleaseExternalId, the apply: one transaction that finishes a claimed
 * release (store/release-claim.ts). The releaser runs it right after the
 * claim; the reaper's `retry_preparing_release` runs it for a release whose
 * releaser died in between (runtime/recover.ts).
 *
 * Locks: workspace 1 (shared); the release row and the holder's creation
 * operation, both tier 4 (FOR UPDATE), in ascending UUID order; the
 * external-ID key 5.1; the task row 5.2 (FOR UPDATE); steps 7 (FOR UPDATE).
 * Compare-and-set on the operation's (`release_operation_id`,
 * `release_generation`) = the claim's:
 * - another release id or generation: `stale_claim`, zero writes;
 * - operation `preparing-release`, release `running`: the task's
 *   `external_id` and `external_id_settled_at` cleared; operation
 *   `preparing-release -> preparing` with `release_applied = true` (so
 *   Complete answers `CreatedIdentityLost`); release row `completed`;
 * - release already `completed` (the releaser and the reaper both ran it):
 *   replayed, zero writes;
 * - anything else (the creation left `preparing-release` another way, a step
 *   busy, the task no longer holding the ID): `creation_state_conflict`,
 *   zero writes.
 * No task revision and no event.
 */
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { runTransaction, type Db } from '../db/tx';
import {
  assertReleasable,
  clearExternalIdLocked,
  lockHolderTaskLocked,
  lockReleaseAndOperationLocked,
  lockWorkspaceSharedLocked,
  RELEASES,
} from './release-locks';
import type { ReleaseClaim } from './release-claim';
import { lockStepsLocked } from './step-rows';

export interface ReleaseApplyResult {
  releaseId: string;
  operationId: string;
  taskId: string;
  /** The release was already applied (by the releaser or by recovery); nothing was written. */
  replayed: boolean;
}

interface ReleaseRow {
  workspace_id: string;
  task_id: string;
  creation_operation_id: string;
  external_id: string;
}

export async function applyExternalIdRelease(
  db: Db,
  ref: Pick<ReleaseClaim, 'releaseId' | 'generation'>,
): Promise<ReleaseApplyResult> {
  return runTransaction(db, 'ReleaseExternalId.Apply', async (tx) => {
    // These columns never change after the claim's insert; the locked read below re-reads the state.
    const rel = await tx.one<ReleaseRow>(
      `SELECT workspace_id, task_id, creation_operation_id, external_id FROM ${RELEASES} WHERE id = ?`,
      [ref.releaseId],
    );
    if (!rel) throw new TaskLedgerError('not_found', `external-ID release ${ref.releaseId} does not exist`);
    const detail = { release_id: ref.releaseId, operation_id: rel.creation_operation_id };
    if (!(await lockWorkspaceSharedLocked(tx, rel.workspace_id))) {
      throw new ConflictError('creation_state_conflict', 'the workspace of this release no longer exists', detail);
    }
    const { release, op } = await lockReleaseAndOperationLocked(tx, ref.releaseId, rel.creation_operation_id, () =>
      tx.one<{ state: string }>(`SELECT state FROM ${RELEASES} WHERE id = ? FOR UPDATE`, [ref.releaseId]),
    );
    const task = await lockHolderTaskLocked(tx, rel.workspace_id, rel.external_id, rel.task_id);
    const steps = await lockStepsLocked(tx, rel.creation_operation_id);
    if (!op || !release)
      throw new TaskLedgerError('not_found', 'the release or its creation operation is gone', detail);
    if (op.release_operation_id !== ref.releaseId || op.release_generation !== ref.generation) {
      throw new ConflictError('stale_claim', 'the creation is claimed by another release or generation', {
        ...detail,
        release_operation_id: op.release_operation_id,
        release_generation: op.release_generation,
      });
    }
    const result = { releaseId: ref.releaseId, operationId: op.id, taskId: rel.task_id };
    if (release.state === 'completed') return { ...result, replayed: true };
    if (op.state !== 'preparing-release') {
      throw new ConflictError('creation_state_conflict', `the creation is ${op.state}, not preparing-release`, detail);
    }
    // Nothing claims a step of a preparing-release creation, so this holds since the claim; a break is a bug.
    assertReleasable(op.id, steps);
    if (!task || task.external_id !== rel.external_id || task.creation_operation_id !== op.id) {
      throw new ConflictError('creation_state_conflict', 'the task no longer holds the released ID', detail);
    }
    await clearExternalIdLocked(tx, task.id);
    await tx.exec(
      `UPDATE task_creation_operations SET state = 'preparing', release_applied = ?, updated_at = ${tx.now}
        WHERE id = ? AND state = 'preparing-release' AND release_operation_id = ? AND release_generation = ?`,
      [true, op.id, ref.releaseId, ref.generation],
    );
    await tx.exec(
      `UPDATE ${RELEASES} SET state = 'completed', completed_at = ${tx.now}, updated_at = ${tx.now}
        WHERE id = ? AND state = 'running'`,
      [ref.releaseId],
    );
    return { ...result, replayed: false };
  });
}
