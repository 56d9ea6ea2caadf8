/**
 * The plain reads of a creation's task row and retained identity that the operation guard's locks answer (ADR 0034).
 *
 * Contract: `TASK_ROW_READ` reads every column the guard's task lock needs and every column the check of the rows
 * Begin inserted (`verifyPlannedRowsLocked`) hashes; `IDENTITY_ROW_READ` likewise for the identity. A transaction
 * that goes on to that check (`planned`, store/operation-guard.ts) locks each row by the very same statement with
 * `FOR UPDATE` (`lockTaskChainLocked`), and that answer answers the plain read when the same transaction issues it
 * later, until it writes the table (`Tx.batchAhead`'s `answering`, as ADR 0032's effect-row locks do): the row is
 * locked from then on, so a read could only answer the same. Every other guarded transaction locks with the guard's
 * columns only (`TASK_GUARD_READ`, `IDENTITY_GUARD_READ`): no task text, and no answers kept. The check
 * hashes only Begin's columns (`PLANNED_TASK_COLUMNS`, `PLANNED_IDENTITY_COLUMNS`), the keys of the plan's row
 * documents (src/plan/plan-types.ts), which Begin inserts. Pure constants; no I/O.
 */
import type { IdentityRowDoc, TaskRowDoc } from '../plan/plan-types';

/** The columns of the task row that Begin's manifest hashes (`database_rows`): every key of the plan's `TaskRowDoc`. */
export const PLANNED_TASK_COLUMNS = [
  'id',
  'workspace_id',
  'workflow_id',
  'workflow_step_id',
  'parent_id',
  'title',
  'description',
  'start_policy',
] as const satisfies readonly (keyof TaskRowDoc)[];

/** The columns of the retained identity that Begin's manifest hashes: every key of the plan's `IdentityRowDoc`. */
export const PLANNED_IDENTITY_COLUMNS = [
  'task_id',
  'workspace_id',
] as const satisfies readonly (keyof IdentityRowDoc)[];

/** Compiles only while the lists above name every column of the plan's row documents (they cannot drift apart). */
export type PlannedColumnsComplete = [
  Exclude<keyof TaskRowDoc, (typeof PLANNED_TASK_COLUMNS)[number]>,
  Exclude<keyof IdentityRowDoc, (typeof PLANNED_IDENTITY_COLUMNS)[number]>,
] extends [never, never]
  ? true
  : never;
export const PLANNED_COLUMNS_COMPLETE: PlannedColumnsComplete = true;

/** What every guard's lock reads of its task row: state, lifecycle, external ID, WIP. */
const GUARD_TASK_COLUMNS = [
  'id',
  'workspace_id',
  'creation_state',
  'lifecycle_state',
  'lifecycle_generation',
  'external_id',
  'revision',
  'awaits_blockers',
  'workflow_step_id',
  'wip_admitted',
  'queued_for_step_id',
] as const;

/** The guard's own columns of the task row only: the lock of a transaction that does not check Begin's rows. */
export const TASK_GUARD_READ = `SELECT ${GUARD_TASK_COLUMNS.join(', ')} FROM tasks WHERE id = ?`;

/**
 * The guard's columns, then Begin's others (among them `title` and `description`, up to 64 KiB): the lock of a
 * transaction that goes on to check Begin's rows (Complete's phases, the ledger batch that may run phase A), and
 * that check's read.
 */
export const TASK_ROW_READ = `SELECT ${[
  ...GUARD_TASK_COLUMNS,
  ...PLANNED_TASK_COLUMNS.filter((c) => !(GUARD_TASK_COLUMNS as readonly string[]).includes(c)),
].join(', ')} FROM tasks WHERE id = ?`;

/** The identity's state: what every guard's lock reads of it. */
export const IDENTITY_GUARD_READ = 'SELECT state FROM task_identities WHERE task_id = ?';

/** The identity's state (the guard's), then Begin's columns. */
export const IDENTITY_ROW_READ = 'SELECT state, task_id, workspace_id FROM task_identities WHERE task_id = ?';

/** Only `columns` of `row`: what the manifest hashed of a row read with more. */
export function pickColumns(row: Record<string, unknown>, columns: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const c of columns) out[c] = row[c];
  return out;
}
