/**
 * WIP admission (companion notes §3): a workflow step's `wip_limit` is a gate
 * at launch time, never a change of start policy. A task holds a slot of its
 * step while `wip_admitted` is true; one whose launch found no free slot waits
 * in the step's queue (`queued_for_step_id`, oldest `queued_at` first). A
 * task that never launches (no agent, or a deferred start not yet resolved)
 * neither holds a slot nor queues. `wip_limit = 0` is unlimited.
 *
 * Every change of a step's slots or queue is made under that step's
 * admission lock: its `workflow_steps` row, FOR UPDATE, at tier 2 (after the
 * workspace, before any operation or task row). So the count read under the
 * lock is exact and two admissions into one step never both see the last
 * free slot. None of these helpers begins a transaction; the `...Locked`
 * ones run inside the caller's and take no lock of their own except where
 * said.
 */
import { TIER } from '../db/lock-plan';
import { bool, type Statement, type Tx } from '../db/tx';

export interface AdmissionStep {
  id: string;
  workflow_id: string;
  workspace_id: string;
  wip_limit: number;
}

/** A task a freed slot admits: the caller locks its row (5.2) in order, then `admitLocked`. */
export interface QueueHead {
  task_id: string;
  workspace_id: string;
  creation_operation_id: string;
}

const STEP_COLUMNS = 'id, workflow_id, workspace_id, wip_limit';

function normalizeStep(row: AdmissionStep): AdmissionStep {
  return { ...row, wip_limit: Number(row.wip_limit) };
}

/** A step read without a lock (the step row itself never changes after setup; the lock is for its slots). */
export async function peekStep(tx: Tx, stepId: string): Promise<AdmissionStep | undefined> {
  const row = await tx.one<AdmissionStep>(`SELECT ${STEP_COLUMNS} FROM workflow_steps WHERE id = ?`, [stepId]);
  return row && normalizeStep(row);
}

/** Takes the admission locks (tier 2, FOR UPDATE) of these steps in ascending ID order. */
export async function lockAdmissionStepsLocked(
  tx: Tx,
  stepIds: readonly string[],
): Promise<Map<string, AdmissionStep>> {
  const ids = [...new Set(stepIds)].sort();
  const out = new Map<string, AdmissionStep>();
  for (const id of ids) {
    tx.lockRow(TIER.WORKFLOW, 'workflow_steps', id);
    const row = await tx.one<AdmissionStep>(`SELECT ${STEP_COLUMNS} FROM workflow_steps WHERE id = ? FOR UPDATE`, [id]);
    if (row) out.set(id, normalizeStep(row));
  }
  return out;
}

/** Tasks holding a slot of the step (exact under its admission lock). */
export async function admittedCountLocked(tx: Tx, stepId: string): Promise<number> {
  const row = await tx.one<{ n: number | string }>(
    `SELECT COUNT(*) AS n FROM tasks WHERE workflow_step_id = ? AND wip_admitted = ? AND lifecycle_state <> 'deleted'`,
    [stepId, true],
  );
  return Number(row?.n ?? 0);
}

export function hasFreeSlot(step: AdmissionStep, admitted: number): boolean {
  return step.wip_limit === 0 || admitted < step.wip_limit;
}

/**
 * The oldest queued tasks of the step that its free slots admit, after
 * `leaving` slots are given back (a task moving out or deleted). A plain read:
 * under the step's admission lock no one else changes its queue or slots.
 * The caller locks these task rows (5.2) with its own, in ascending order.
 */
export async function promotionHeadsLocked(tx: Tx, step: AdmissionStep, leaving: number): Promise<QueueHead[]> {
  if (step.wip_limit === 0) return [];
  const free = step.wip_limit - ((await admittedCountLocked(tx, step.id)) - leaving);
  if (free <= 0) return [];
  return tx.rows<QueueHead>(
    `SELECT id AS task_id, workspace_id, creation_operation_id FROM tasks
      WHERE queued_for_step_id = ? AND lifecycle_state <> 'deleted'
      ORDER BY queued_at, id LIMIT ${Math.floor(free)}`,
    [step.id],
  );
}

/** Gives the tasks a slot of their step (the caller holds the step's admission lock and the task rows). */
export async function admitLocked(tx: Tx, taskIds: readonly string[]): Promise<void> {
  if (taskIds.length === 0) return;
  const { sql, params } = admitStatement(tx, taskIds);
  await tx.exec(sql, [...params]);
}

/**
 * The assignments that give a task its WIP slot: `admitStatement`'s, and those of phase B's completion of a task
 * whose launch claim it takes (store/launch-claim-in-complete.ts), which admits it in the same UPDATE.
 */
export function admitAssignments(tx: Tx): { sql: string; params: [boolean] } {
  return {
    sql: `wip_admitted = ?, admitted_at = ${tx.now}, queued_for_step_id = NULL, queued_at = NULL`,
    params: [true],
  };
}

/** `admitLocked`'s write, for a transaction that sends it with its COMMIT (`Tx.commitWith`). */
export function admitStatement(tx: Tx, taskIds: readonly string[]): Statement {
  const admit = admitAssignments(tx);
  return {
    sql: `UPDATE tasks SET ${admit.sql}, updated_at = ${tx.now}
      WHERE id IN (${taskIds.map(() => '?').join(', ')})`,
    params: [...admit.params, ...taskIds],
  };
}

/**
 * Puts the task at the back of the step's queue. A task already waiting there keeps its place and nothing is
 * written (a repeated wake-up of a queued task changes no row).
 */
export async function enqueueLocked(tx: Tx, taskId: string, stepId: string): Promise<void> {
  await tx.exec(
    `UPDATE tasks SET wip_admitted = ?, admitted_at = NULL, queued_at = ${tx.now}, queued_for_step_id = ?,
            updated_at = ${tx.now}
      WHERE id = ? AND (queued_for_step_id IS NULL OR queued_for_step_id <> ?)`,
    [false, stepId, taskId, stepId],
  );
}

/** Leaves slots and queues (a deleted task, or one whose launch never applies). */
export async function releaseSlotLocked(tx: Tx, taskId: string): Promise<void> {
  await tx.exec(
    `UPDATE tasks SET wip_admitted = ?, admitted_at = NULL, queued_for_step_id = NULL, queued_at = NULL,
            updated_at = ${tx.now}
      WHERE id = ?`,
    [false, taskId],
  );
}

/** The placement columns of a locked task row, normalized. */
export interface Placement {
  workflow_step_id: string | null;
  wip_admitted: boolean;
  queued_for_step_id: string | null;
}

export function placementOf(row: { workflow_step_id: unknown; wip_admitted: unknown; queued_for_step_id: unknown }) {
  return {
    workflow_step_id: (row.workflow_step_id as string | null) ?? null,
    wip_admitted: bool(row.wip_admitted),
    queued_for_step_id: (row.queued_for_step_id as string | null) ?? null,
  } satisfies Placement;
}
