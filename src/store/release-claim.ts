/**
 * ReleaseExternalId, the claim: one transaction that records an operator's
 * release of an external ID as an `external_id_releases` row with its own
 * id, and either finishes it (completed holder) or claims the holder's
 * creation for it (preparing holder; spec "Begin and visibility",
 * `preparing-release`). store/release-apply.ts finishes a claim.
 *
 * Locks: workspace 1 (shared); the new release row (INSERT) and the holder's
 * creation operation (FOR UPDATE), both tier 4, in ascending UUID order; the
 * external-ID key 5.1; the task row 5.2 (FOR UPDATE); for a preparing holder
 * its steps 7 (FOR UPDATE).
 * - holder `completed`: release row `completed` (holder_state `completed`);
 *   the task's `external_id` and `external_id_settled_at` cleared. Nothing
 *   else of the task or operation changes.
 * - holder `preparing`, when no step is `unknown|running` and no
 *   compensation is pending: operation `preparing -> preparing-release`,
 *   `release_operation_id` = the release, `release_generation` + 1; release
 *   row `running` (holder_state `preparing`). The ID stays on the task until
 *   the apply commits. A step in the way: `creation_state_conflict`.
 * - holder `completing` or already `preparing-release` (or `aborted`):
 *   `creation_state_conflict`.
 * - no task holds the ID, or the workspace is gone: `none`.
 * - the holder changed between the unlocked peek and the locks: `moved`
 *   (rolled back); the caller restarts.
 * Every refusal, `none` and `moved` writes nothing. No task revision and no
 * event is ever written.
 */
import { randomUUID } from 'node:crypto';
import { ConflictError, TaskLedgerError, ValidationError } from '../domain/errors';
import { runTransaction, type Db, type Tx } from '../db/tx';
import {
  assertReleasable,
  clearExternalIdLocked,
  lockHolderTaskLocked,
  lockReleaseAndOperationLocked,
  lockWorkspaceSharedLocked,
  RELEASES,
} from './release-locks';
import { lockStepsLocked } from './step-rows';

/** A claimed release: the fencing pair the apply compares (`release_operation_id`, `release_generation`). */
export interface ReleaseClaim {
  readonly releaseId: string;
  readonly generation: number;
  readonly operationId: string;
  readonly taskId: string;
  readonly workspaceId: string;
}

export type ReleaseClaimResult =
  | { kind: 'none' }
  | { kind: 'moved' }
  | { kind: 'released'; releaseId: string; operationId: string; taskId: string }
  | { kind: 'claimed'; claim: ReleaseClaim };

interface Peek {
  task_id: string;
  creation_operation_id: string;
  state: string;
}

function checkRequestedBy(requestedBy: unknown): asserts requestedBy is string {
  if (typeof requestedBy !== 'string' || requestedBy.length === 0 || requestedBy.length > 200) {
    throw new ValidationError('/requested_by', 'must be 1-200 characters');
  }
}

/** The release row, inserted at its place in tier 4 (before or after the operation, by UUID). */
function insertRelease(
  tx: Tx,
  row: { id: string; workspaceId: string; peek: Peek; externalId: string; requestedBy: string },
): Promise<number> {
  const completed = row.peek.state === 'completed';
  return tx.exec(
    `INSERT INTO ${RELEASES} (id, workspace_id, task_id, creation_operation_id, external_id, holder_state, state,
                              requested_by, requested_at, updated_at, completed_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${tx.now}, ${tx.now}, ${completed ? tx.now : 'NULL'})`,
    [
      row.id,
      row.workspaceId,
      row.peek.task_id,
      row.peek.creation_operation_id,
      row.externalId,
      completed ? 'completed' : 'preparing',
      completed ? 'completed' : 'running',
      row.requestedBy,
    ],
  );
}

export async function claimExternalIdRelease(
  db: Db,
  workspaceId: string,
  externalId: string,
  requestedBy: string,
): Promise<ReleaseClaimResult> {
  checkRequestedBy(requestedBy);
  const releaseId = randomUUID();
  return runTransaction<ReleaseClaimResult>(db, 'ReleaseExternalId.Claim', async (tx) => {
    if (!(await lockWorkspaceSharedLocked(tx, workspaceId))) return { kind: 'none' };
    const peek = await tx.one<Peek>(
      `SELECT t.id AS task_id, t.creation_operation_id, o.state FROM tasks t
         JOIN task_creation_operations o ON o.id = t.creation_operation_id
        WHERE t.workspace_id = ? AND t.external_id = ?`,
      [workspaceId, externalId],
    );
    if (!peek) return { kind: 'none' };
    const opId = peek.creation_operation_id;
    // Only a holder that may be released gets a row; a busy one is refused below, under its lock.
    const records = peek.state === 'completed' || peek.state === 'preparing';
    const { op } = await lockReleaseAndOperationLocked(tx, releaseId, opId, () =>
      records ? insertRelease(tx, { id: releaseId, workspaceId, peek, externalId, requestedBy }) : Promise.resolve(0),
    );
    if (!op) throw new TaskLedgerError('not_found', `creation operation ${opId} of task ${peek.task_id} is missing`);
    const task = await lockHolderTaskLocked(tx, workspaceId, externalId, peek.task_id);
    const moved = !task || task.external_id !== externalId || task.creation_operation_id !== opId;
    if (moved || op.state !== peek.state) {
      tx.rollbackOnly();
      return { kind: 'moved' };
    }
    if (op.state === 'completed') {
      await clearExternalIdLocked(tx, task.id);
      return { kind: 'released', releaseId, operationId: opId, taskId: task.id };
    }
    if (op.state !== 'preparing') {
      throw new ConflictError('creation_state_conflict', `the holder's creation is ${op.state}; retry shortly`, {
        operation_id: opId,
        state: op.state,
      });
    }
    assertReleasable(opId, await lockStepsLocked(tx, opId));
    const generation = op.release_generation + 1;
    const changed = await tx.exec(
      `UPDATE task_creation_operations SET state = 'preparing-release', release_operation_id = ?, release_generation = ?,
              updated_at = ${tx.now}
        WHERE id = ? AND state = 'preparing' AND release_generation = ?`,
      [releaseId, generation, opId, op.release_generation],
    );
    if (changed !== 1) throw new Error(`internal: locked operation ${opId} did not take the release claim`);
    return { kind: 'claimed', claim: { releaseId, generation, operationId: opId, taskId: task.id, workspaceId } };
  });
}
