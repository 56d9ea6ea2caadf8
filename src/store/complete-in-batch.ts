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
 * The verification runs over the step rows as the batch wrote them (`written`,
 * built from its own records) while those rows are re-read, in one round
 * trip; it stands only when the re-read rows equal them field by field, and
 * otherwise runs again over the re-read rows. Either way it is the
 * verification of the rows as stored.
 *
 * Everything before the two writes is a read, so a predicate that does not
 * hold — or a verification lock the batch did not take and can no longer
 * take in order — writes nothing here: the batch commits its steps as before
 * and the operation's Complete runs phase A on its own, where a failed check
 * is reported as it always was. Answers `completing` (with the step rows it
 * verified, which phase B's guess starts from: ADR 0021) or why not; the two
 * writes are sent with the batch's COMMIT (`Tx.commitWith`), so nothing may
 * be issued after this in the transaction.
 */
import type { Tx } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import { phaseAWrites } from './complete';
import { completeLockNeeds, verifyCompletionLocked } from './complete-verify';
import type { GuardedOperation, TaskLockRow } from './operation-guard';
import { lockStepsLocked, STEP_COLUMNS } from './step-rows';
import type { StepRow } from './types';

const STEP_FIELDS = STEP_COLUMNS.split(', ');

export type PhaseAInBatch = 'completing' | 'not_completable' | 'predicate_failed' | 'lock_order';

export async function completePhaseAInBatchLocked(
  tx: Tx,
  guarded: GuardedOperation,
  chain: { task: TaskLockRow; identityState: string | undefined },
  /** The operation's step rows as the batch wrote them: verified while the stored ones are re-read. */
  written?: readonly StepRow[],
): Promise<{ phaseA: PhaseAInBatch; steps?: readonly StepRow[] }> {
  const { op, plan, workspaceState } = guarded;
  if (op.state !== 'preparing' || workspaceState !== 'active') return { phaseA: 'not_completable' };
  const { task, identityState } = chain;
  if (identityState !== 'preparing' || task.lifecycle_state === 'deleted' || task.creation_state !== 'preparing') {
    return { phaseA: 'not_completable' };
  }
  // The step rows as this transaction recorded them (the locks are held: this is a read), and the verification
  // over the rows as written, issued together: one round trip when the two agree.
  const stored = lockStepsLocked(tx, op.id);
  const early = written ? verifyStepsLocked(tx, [...written], plan) : null;
  const [steps, verdict] = await Promise.all([stored, early]);
  const result = verdict !== null && sameSteps(steps, written!) ? verdict : await verifyStepsLocked(tx, steps, plan);
  if (result !== 'verified') return { phaseA: result };
  // Phase A's writes go with the batch's COMMIT (Tx.commitWith): both rows are locked and were read `preparing`.
  void tx.commitWith(phaseAWrites(tx, op.id, task.id));
  // The step rows verified, as they commit (phase A writes none): phase B guesses its verification from them.
  return { phaseA: 'completing', steps };
}

/** Phase A's checks over these step rows: the Complete predicate, every effect row, the rows Begin inserted. */
async function verifyStepsLocked(
  tx: Tx,
  steps: StepRow[],
  plan: GuardedOperation['plan'],
): Promise<'verified' | 'lock_order' | 'predicate_failed'> {
  if (!tx.canLockRows(completeLockNeeds(steps, plan))) return 'lock_order';
  try {
    await verifyCompletionLocked(tx, steps, plan);
  } catch (err) {
    if (isTaskLedgerError(err)) return 'predicate_failed';
    throw err;
  }
  return 'verified';
}

const comparable = (v: unknown) => (v instanceof Date ? v.getTime() : v);

/** Every column of every step row equal (the same steps, in the same order). */
function sameSteps(stored: readonly StepRow[], written: readonly StepRow[]): boolean {
  const byId = new Map(written.map((s) => [s.id, s]));
  return (
    stored.length === written.length &&
    stored.every((s) => {
      const w = byId.get(s.id) as unknown as Record<string, unknown> | undefined;
      const r = s as unknown as Record<string, unknown>;
      return w !== undefined && STEP_FIELDS.every((k) => comparable(r[k]) === comparable(w[k]));
    })
  );
}
