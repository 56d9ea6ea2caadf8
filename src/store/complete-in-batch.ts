/**
 * Complete's phase A inside the ledger batch that armed the launch intent
 * (docs/adr/0016-complete-phase-a-in-the-arming-batch.md). Never begins a
 * transaction; runs in `claimAndApplyLedgerSteps`'s, after its last record.
 *
 * That transaction already holds what phase A acquires: workspace 1,
 * operation 4.2, the external-ID key 5.1 (the batch's claim took it), task
 * 5.2, identity 6, every step row 7, and — taken with the batch's own effect
 * locks, in one global order — every row Complete's verification reads
 * (8..15, `completeLockNeeds`). Here it checks exactly what phase A checks
 * (operation `preparing` in an active workspace, identity `preparing`, task
 * not deleted, the Complete predicate over the step rows as this transaction
 * wrote them, each effect row byte-equivalent to its evidence, the rows
 * Begin inserted byte-equivalent to the manifest) and writes exactly what
 * phase A writes: operation and task `preparing -> completing`. Phase B stays
 * its own transaction (store/complete.ts).
 *
 * Everything before the two writes is a read, so a predicate that does not
 * hold — or a verification lock the batch did not take and can no longer
 * take in order — writes nothing here: the batch commits its steps as before
 * and the operation's Complete runs phase A on its own, where a failed check
 * is reported as it always was. Answers `completing` or why not; the two
 * writes are sent with the batch's COMMIT (`Tx.commitWith`), so nothing may
 * be issued after this in the transaction.
 */
import type { Tx } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import { phaseAWrites } from './complete';
import { completeLockNeeds, verifyCompletePredicateLocked, verifyPlannedRowsLocked } from './complete-verify';
import type { GuardedOperation, TaskLockRow } from './operation-guard';
import { lockStepsLocked } from './step-rows';

export type PhaseAInBatch = 'completing' | 'not_completable' | 'predicate_failed' | 'lock_order';

export async function completePhaseAInBatchLocked(
  tx: Tx,
  guarded: GuardedOperation,
  chain: { task: TaskLockRow; identityState: string | undefined },
): Promise<PhaseAInBatch> {
  const { op, plan, workspaceState } = guarded;
  if (op.state !== 'preparing' || workspaceState !== 'active') return 'not_completable';
  const { task, identityState } = chain;
  if (identityState !== 'preparing' || task.lifecycle_state === 'deleted' || task.creation_state !== 'preparing') {
    return 'not_completable';
  }
  // The step rows as this transaction recorded them (the locks are held: this is a read).
  const steps = await lockStepsLocked(tx, op.id);
  if (!tx.canLockRows(completeLockNeeds(steps, plan))) return 'lock_order';
  try {
    await Promise.all([verifyCompletePredicateLocked(tx, steps, plan), verifyPlannedRowsLocked(tx, plan)]);
  } catch (err) {
    if (isTaskLedgerError(err)) return 'predicate_failed';
    throw err;
  }
  // Phase A's writes go with the batch's COMMIT (Tx.commitWith): both rows are locked and were read `preparing`.
  void tx.commitWith(phaseAWrites(tx, op.id, task.id));
  return 'completing';
}
