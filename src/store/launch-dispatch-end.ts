/**
 * A launch that will not happen ends visibly: its dispatch claim becomes
 * `cancelled` (no deletion fence) with the reason in `error_code` /
 * `error_json`, and its session `stopped`, instead of being retried forever
 * or left in `retry_wait` with nobody to wake it. `GET /tasks/:id` then shows
 * `launch_state: "cancelled"` and the reason; `taskledger ops show` the claim.
 *
 * A launch that ends gives back the task's WIP slot (or its place in the
 * queue), and the slot admits the step's oldest queued task in the same
 * transaction (returned: the caller wakes its launch), like a deletion.
 *
 * AbandonLaunchDispatch — the worker holding a live claim found the launch
 * must not run (the agent profile changed since Begin, so the command is not
 * the one the creation bound: `launch_config_changed`). One transaction:
 * workspace 1 (share), the task's admission step 2 (when it holds a slot or
 * a place in a queue), operation 4.2, the task and the promoted heads 5.2
 * (ascending), identity 6, the claim 8.2 (compare-and-set: `running`, this
 * generation and owner, lease alive), the session 9 (`starting -> stopped`).
 * Nothing was started. The task moving between the unlocked peek and its
 * lock restarts the command.
 *
 * CancelExhaustedDispatch — a claim in `retry_wait` that used up its attempts
 * (every start was refused by the OS: no agent ever ran). Same locks;
 * compare-and-set on `retry_wait`, the observed generation and `attempt >=
 * maxAttempts`; session `prepared -> stopped`. Reason `retries_exhausted`.
 *
 * `endDispatchLocked` is the claim-and-session part, for a caller that holds
 * the task's locks already (MarkTaskDone cancels a done task's pending
 * launch: `task_done`).
 *
 * A stale claim or a claim that moved on: typed `stale_claim`, zero writes.
 * No event.
 */
import { canonicalJson } from '../canonical/canonical-json';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { nowSql } from '../db/dialect';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import type { DispatchClaim } from './launch-dispatch';
import type { DispatchTarget } from './launch-dispatch-recovery';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import {
  admitLocked,
  lockAdmissionStepsLocked,
  placementOf,
  promotionHeadsLocked,
  releaseSlotLocked,
} from './wip-admission';

export interface LaunchEndReason {
  code: 'launch_config_changed' | 'retries_exhausted' | 'task_done';
  message: string;
}

export interface LaunchEnd {
  /** Queued tasks the freed slot admitted: the caller wakes their launches after the commit. */
  admitted: string[];
}

interface EndRef {
  operationId: string;
  dispatchId: string;
  sessionId: string;
}

interface EndWhere {
  sql: string;
  params: (string | number)[];
}

/** The claim (8.2) ends `cancelled` with the reason; the session (9) `stopped`. The caller holds 4.2 and 5.2. */
export async function endDispatchLocked(
  tx: Tx,
  ref: { dispatchId: string; sessionId: string },
  where: EndWhere,
  sessionFrom: string,
  reason: LaunchEndReason,
): Promise<void> {
  tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', ref.dispatchId);
  const changed = await tx.exec(
    `UPDATE task_launch_dispatch_claims SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL,
            error_code = ?, error_json = ?, updated_at = ${tx.now}
      WHERE id = ? AND ${where.sql}`,
    [
      reason.code,
      canonicalJson({ code: reason.code, message: reason.message.slice(0, 2000) }),
      ref.dispatchId,
      ...where.params,
    ],
  );
  if (changed !== 1)
    throw new ConflictError('stale_claim', 'the dispatch claim moved on', { dispatch_id: ref.dispatchId });
  tx.lockRow(TIER.SESSION, 'task_sessions', ref.sessionId);
  await tx.exec(`UPDATE task_sessions SET state = 'stopped', updated_at = ${tx.now} WHERE id = ? AND state = ?`, [
    ref.sessionId,
    sessionFrom,
  ]);
}

interface PlacementPeek {
  task_id: string;
  workspace_id: string;
  workflow_step_id: string | null;
  wip_admitted: unknown;
  queued_for_step_id: string | null;
}

async function endOnce(
  tx: Tx,
  ref: EndRef,
  actor: string,
  where: EndWhere,
  sessionFrom: string,
  reason: LaunchEndReason,
): Promise<LaunchEnd | 'moved'> {
  const peek = await tx.one<PlacementPeek>(
    `SELECT t.id AS task_id, t.workspace_id, t.workflow_step_id, t.wip_admitted, t.queued_for_step_id
       FROM task_creation_operations o JOIN tasks t ON t.id = o.task_id WHERE o.id = ?`,
    [ref.operationId],
  );
  if (!peek) throw new TaskLedgerError('not_found', 'the operation has no task', { operation_id: ref.operationId });
  const held = placementOf(peek);
  const stepId = held.wip_admitted || held.queued_for_step_id !== null ? held.workflow_step_id : null;
  // Tier 1 before the admission lock (2); the guard below finds it held.
  tx.lockRow(TIER.WORKSPACE, 'workspaces', peek.workspace_id);
  await tx.one(`SELECT id FROM workspaces WHERE id = ? ${tx.forShare}`, [peek.workspace_id]);
  const steps = await lockAdmissionStepsLocked(tx, stepId === null ? [] : [stepId]);
  const step = stepId === null ? undefined : steps.get(stepId);
  const heads = held.wip_admitted && step ? await promotionHeadsLocked(tx, step, 1) : [];
  const { op } = await guardOperationLocked(tx, { kind: 'operation', operationId: ref.operationId, actor });
  const { task } = await lockTaskChainLocked(tx, op, { externalIdKey: false, heads: heads.map((h) => h.task_id) });
  if (!task) throw new TaskLedgerError('not_found', 'the operation has no task', { operation_id: ref.operationId });
  const now = placementOf(task);
  const same =
    now.workflow_step_id === held.workflow_step_id &&
    now.wip_admitted === held.wip_admitted &&
    now.queued_for_step_id === held.queued_for_step_id;
  if (!same) return 'moved';
  await endDispatchLocked(tx, ref, where, sessionFrom, reason);
  if (stepId === null) return { admitted: [] };
  await releaseSlotLocked(tx, task.id);
  const admitted = heads.map((h) => h.task_id);
  await admitLocked(tx, admitted);
  return { admitted };
}

/** Why 5: the task only moves under us when a concurrent move of it wins; twice in a row is already rare. */
const MAX_PLACEMENT_CHANGES = 5;

async function endLaunch(
  db: Db,
  name: string,
  ...args: Parameters<typeof endOnce> extends [Tx, ...infer R] ? R : never
): Promise<LaunchEnd> {
  for (let i = 0; i < MAX_PLACEMENT_CHANGES; i++) {
    const r = await runTransaction(db, name, (tx) => endOnce(tx, ...args));
    if (r !== 'moved') return r;
  }
  throw new TaskLedgerError('retry_exhausted', 'the task kept moving while its launch was ended', {
    operation_id: args[0].operationId,
  });
}

export async function abandonLaunchDispatch(db: Db, claim: DispatchClaim, reason: LaunchEndReason): Promise<LaunchEnd> {
  return endLaunch(
    db,
    'AbandonLaunchDispatch',
    claim,
    claim.owner,
    {
      sql: `state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${nowSql(db.dialect)}`,
      params: [claim.generation, claim.owner],
    },
    'starting',
    reason,
  );
}

export async function cancelExhaustedDispatch(
  db: Db,
  target: DispatchTarget,
  maxAttempts: number,
  actor: string,
): Promise<LaunchEnd> {
  return endLaunch(
    db,
    'CancelExhaustedDispatch',
    target,
    actor,
    {
      sql: "state = 'retry_wait' AND generation = ? AND attempt >= ? AND deletion_operation_id IS NULL",
      params: [target.generation, maxAttempts],
    },
    'prepared',
    { code: 'retries_exhausted', message: `the agent could not be started in ${maxAttempts} attempts` },
  );
}
