/**
 * Releasing an external ID (companion notes §2): an operator's action for an
 * identity a person judged abandoned. It clears `external_id` and
 * `external_id_settled_at` on the holder without touching anything else of
 * the task, so a new create with that ID makes a new task.
 *
 * One transaction, in the global lock order: workspace (1, shared), the
 * holder's creation operation (4.2, FOR UPDATE), the external-ID key (5.1),
 * the task row (5.2, FOR UPDATE), and for a `preparing` holder its steps (7).
 * - holder `preparing`: allowed only when no step is `unknown|running` and no
 *   compensation is pending (the spec's release-claim predicate); also sets
 *   `release_applied = true`, so Complete reports `CreatedIdentityLost`.
 * - holder `completing` (Complete between its phases) or `preparing-release`:
 *   `creation_state_conflict`; retry once Complete has finished.
 * - holder `completed`: only the two columns change.
 * No task revision and no event are written. If the holder changed between
 * the unlocked read and the locks, the command restarts.
 */
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { externalIdKeyDigest } from '../store/lock-keys';
import { COMPENSATION_PENDING, lockStepsLocked } from '../store/step-rows';

export type ReleaseResult =
  { released: true; task_id: string; operation_id: string; release_applied: boolean } | { released: false };

type Attempt = ReleaseResult | { moved: true };

/** Why 5: the holder only moves when a concurrent release or create wins; twice in a row is already rare. */
const MAX_HOLDER_CHANGES = 5;

export async function releaseExternalId(db: Db, workspaceId: string, externalId: string): Promise<ReleaseResult> {
  for (let i = 0; i < MAX_HOLDER_CHANGES; i++) {
    const res = await runTransaction<Attempt>(db, 'ReleaseExternalId', async (tx) => {
      tx.lockRow(TIER.WORKSPACE, 'workspaces', workspaceId);
      const ws = await tx.one(`SELECT id FROM workspaces WHERE id = ? ${tx.forShare}`, [workspaceId]);
      if (!ws) return { released: false };
      const peek = await tx.one<{ id: string; creation_operation_id: string }>(
        'SELECT id, creation_operation_id FROM tasks WHERE workspace_id = ? AND external_id = ?',
        [workspaceId, externalId],
      );
      if (!peek) return { released: false };
      const opId = peek.creation_operation_id;
      tx.lockRow(TIER.OPERATION, 'task_creation_operations', opId);
      const op = await tx.one<{ state: string }>('SELECT state FROM task_creation_operations WHERE id = ? FOR UPDATE', [
        opId,
      ]);
      await tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(workspaceId, externalId));
      tx.lockRow(TIER.TASK, 'tasks', peek.id);
      const task = await tx.one<{ external_id: string | null; creation_operation_id: string }>(
        'SELECT external_id, creation_operation_id FROM tasks WHERE id = ? FOR UPDATE',
        [peek.id],
      );
      if (!task || task.external_id !== externalId || task.creation_operation_id !== opId) return { moved: true };
      if (!op) throw new TaskLedgerError('not_found', `creation operation ${opId} of task ${peek.id} is missing`, {});
      let releaseApplied = false;
      if (op.state === 'preparing') {
        const steps = await lockStepsLocked(tx, opId);
        const busy = steps.find(
          (s) => s.state === 'unknown' || s.state === 'running' || COMPENSATION_PENDING.has(s.compensation_state),
        );
        if (busy) {
          throw new ConflictError(
            'creation_state_conflict',
            `step ${busy.kind}/${busy.step_key} is ${busy.state} (compensation ${busy.compensation_state}); release after it settles`,
            { operation_id: opId, step_id: busy.id },
          );
        }
        await tx.exec(
          `UPDATE task_creation_operations SET release_applied = ?, updated_at = ${tx.now} WHERE id = ? AND state = 'preparing'`,
          [true, opId],
        );
        releaseApplied = true;
      } else if (op.state !== 'completed') {
        throw new ConflictError('creation_state_conflict', `the holder's creation is ${op.state}; retry shortly`, {
          operation_id: opId,
        });
      }
      await tx.exec(
        `UPDATE tasks SET external_id = NULL, external_id_settled_at = NULL, updated_at = ${tx.now} WHERE id = ?`,
        [peek.id],
      );
      return { released: true, task_id: peek.id, operation_id: opId, release_applied: releaseApplied };
    });
    if (!('moved' in res)) return res;
  }
  throw new TaskLedgerError('retry_exhausted', 'the external ID kept changing holder during release', {});
}
