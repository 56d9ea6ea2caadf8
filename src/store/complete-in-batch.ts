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
import type { SqlParam, Statement } from '../db/batch';
import { RestartCommand } from '../db/dialect';
import { TIER } from '../db/lock-plan';
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
  /** Prove `written` stored with fences the server checks at COMMIT instead of re-reading them (ADR 0030). */
  options: { fence?: boolean } = {},
): Promise<{ phaseA: PhaseAInBatch; steps?: readonly StepRow[] }> {
  const { op, plan, workspaceState } = guarded;
  if (op.state !== 'preparing' || workspaceState !== 'active') return { phaseA: 'not_completable' };
  const { task, identityState } = chain;
  if (identityState !== 'preparing' || task.lifecycle_state === 'deleted' || task.creation_state !== 'preparing') {
    return { phaseA: 'not_completable' };
  }
  // Kept answers stand for rows locked before they were read: only when the batch's union already holds every lock
  // the verification takes (a lock first taken here would come after the answer it should protect).
  const fences =
    written && options.fence && tx.holdsRows(completeLockNeeds(written, plan)) ? stepFences(tx, op.id, written) : null;
  if (fences !== null) {
    // ADR 0030: the rows as written are proved stored by the server (with COMMIT), and the verification over them
    // is answered from what this transaction already read — no round trip of its own.
    for (const s of [...written!].sort(byId)) tx.lockRow(TIER.STEP, 'task_creation_steps', s.id);
    for (const f of fences) tx.expect(f.statement, f.rows, stepsNotAsWritten);
    const verdict = await tx.answerFromKept(() => verifyStepsLocked(tx, [...written!], plan));
    if (verdict !== 'verified') return { phaseA: verdict };
    void tx.commitWith(phaseAWrites(tx, op.id, task.id));
    return { phaseA: 'completing', steps: written };
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

const byId = (a: { id: string }, b: { id: string }) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** A stored step row is not the row the batch wrote: the batch starts over, re-reading them (the checked path). */
const stepsNotAsWritten = () => new RestartCommand('ledger batch: a step row is not stored as the batch wrote it');

/**
 * A fence the server checks with COMMIT: every step row of the operation equal, column by column and byte for byte,
 * to the row as written (as many rows as written), and no other step row. Null when a written row holds a
 * time (a live lease: not a row phase A would verify), which only a re-read can compare.
 *
 * One aggregate over the operation's rows that answers its one row only when the operation has exactly the written
 * rows and each of them matches its written columns (`CASE id WHEN <its id> THEN <its columns match>`). The column
 * comparisons sit inside a CASE, where MariaDB's optimizer, which re-plans a prepared statement on every run, does
 * not analyse them: the earlier form (`(row 1) OR (row 2) OR ...` in the WHERE, plus a count subquery) spent most of
 * its time in range analysis and equality propagation over those ~60 conditions (`perf`: `JOIN::optimize` 47 % of
 * the statement), 440 µs against 320 µs now on the bench VM. PostgreSQL plans it once; it answers the same.
 */
export function stepFences(
  tx: Tx,
  operationId: string,
  written: readonly StepRow[],
): { statement: Statement; rows: number }[] | null {
  const params: SqlParam[] = [operationId, written.length];
  const whens: string[] = [];
  for (const w of written) {
    const conds: string[] = [];
    const values: SqlParam[] = [];
    for (const field of STEP_FIELDS) {
      const v = (w as unknown as Record<string, unknown>)[field];
      if (v === null || v === undefined) {
        conds.push(`${field} IS NULL`);
      } else if (typeof v === 'number') {
        conds.push(`${field} = ?`);
        values.push(v);
      } else if (typeof v === 'string') {
        // MySQL compares text with PAD SPACE even under a binary collation: BINARY compares the bytes.
        conds.push(tx.dialect === 'mysql' ? `BINARY ${field} = ?` : `${field} = ?`);
        values.push(v);
      } else {
        return null;
      }
    }
    // A comparison with NULL (a column stored NULL where a value was written) is not true: the row does not match.
    whens.push(`WHEN ? THEN (CASE WHEN ${conds.join(' AND ')} THEN 1 ELSE 0 END)`);
    params.push(w.id, ...values);
  }
  params.push(written.length);
  return [
    {
      statement: {
        sql: `SELECT 1 AS fenced FROM task_creation_steps WHERE operation_id = ?
               HAVING COUNT(*) = ? AND SUM(CASE id ${whens.join(' ')} ELSE 0 END) = ?`,
        params,
      },
      rows: 1,
    },
  ];
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
