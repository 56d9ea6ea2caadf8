/**
 * Stuck operations: unfinished creations none of whose rows changed for
 * `stuckAfterMs` (a note on an undecided observation is not a change, see
 * store/step-notes.ts), and launch dispatch claims left `unknown` that long,
 * each with the one legal RecoveryAction it waits for (the pure chooser on
 * rows read without locks: what recovery would pick now) and why it has not
 * happened (the notes of its undecided steps). Plain reads only. Used by
 * `taskledger ops list --stuck` and, as a gauge by action, by every reaper
 * sweep (`taskledger_stuck_operations`).
 */
import { readRows, type Db } from '../db/tx';
import type { CompensationState, DispatchState, OperationState, StepKind, StepState } from '../domain/vocab';
import { parseNote } from '../store/step-notes';
import { chooseRecoveryAction } from './recovery-action';

export interface StuckOperation {
  operation_id: string;
  workspace_id: string;
  task_id: string;
  state: OperationState;
  /** The last time any of its rows changed. */
  since: Date;
  /** The one legal RecoveryAction now, or null with the chooser's reason in `waiting_for`. */
  action: string | null;
  waiting_for: string;
}

interface OpRow {
  id: string;
  workspace_id: string;
  task_id: string;
  state: OperationState;
  result_event_id: string | null;
  since: Date;
}

interface StepRow {
  kind: StepKind;
  step_key: string;
  state: StepState;
  compensation_state: CompensationState;
  error_code: string | null;
  error_json: string | null;
}

function sinceSql(db: Db): string {
  return db.dialect === 'postgres'
    ? "clock_timestamp() - (CAST(? AS integer) * interval '1 millisecond')"
    : 'NOW(3) - INTERVAL (? * 1000) MICROSECOND';
}

async function describe(db: Db, op: OpRow, dispatch: DispatchState | null): Promise<StuckOperation> {
  const steps = await readRows<StepRow>(
    db,
    'SELECT kind, step_key, state, compensation_state, error_code, error_json FROM task_creation_steps WHERE operation_id = ? ORDER BY id',
    [op.id],
  );
  const decision = chooseRecoveryAction({
    operationState: op.state,
    steps: steps.map((s) => ({ kind: s.kind, state: s.state, compensationState: s.compensation_state })),
    releaseUnfinished: op.state === 'preparing-release',
    phaseBCommitted: op.result_event_id !== null,
    dispatch: dispatch === null ? null : { state: dispatch, deletionFence: false, proof: null },
  });
  const notes = steps.flatMap((s) => {
    const n = parseNote(s.error_code, s.error_json);
    return n
      ? [`${s.kind}/${s.step_key}: ${n.verdict} (${n.observations}x since ${n.first_observed_at}): ${n.reason}`]
      : [];
  });
  const action = dispatch === 'unknown' ? 'reconcile_launch_dispatch' : decision.action;
  const waiting =
    dispatch === 'unknown'
      ? 'runtime or no-dispatch proof of its launch (docs/recovery.md, launch dispatch claims)'
      : notes.length > 0
        ? notes.join('; ')
        : decision.action === null
          ? `${decision.reason}: ${decision.detail}`
          : 'a reaper to run it (is one running for this workspace?)';
  return {
    operation_id: op.id,
    workspace_id: op.workspace_id,
    task_id: op.task_id,
    state: op.state,
    since: new Date(op.since),
    action,
    waiting_for: waiting,
  };
}

export async function findStuckOperations(
  db: Db,
  options: { stuckAfterMs: number; workspaceId?: string; limit?: number },
): Promise<StuckOperation[]> {
  const limit = Math.max(1, Math.floor(options.limit ?? 200));
  const ms = Math.max(0, Math.floor(options.stuckAfterMs));
  const scope = options.workspaceId === undefined ? '' : 'AND o.workspace_id = ?';
  const scopeParams = options.workspaceId === undefined ? [] : [options.workspaceId];
  const unfinished = await readRows<OpRow>(
    db,
    `SELECT o.id, o.workspace_id, o.task_id, o.state, o.result_event_id,
            GREATEST(o.updated_at, COALESCE((SELECT MAX(s.updated_at) FROM task_creation_steps s WHERE s.operation_id = o.id), o.updated_at)) AS since
       FROM task_creation_operations o
      WHERE o.state IN ('preparing', 'preparing-release', 'completing') ${scope}
        AND o.updated_at <= ${sinceSql(db)}
        AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.updated_at > ${sinceSql(db)})
      ORDER BY o.updated_at LIMIT ${limit}`,
    [...scopeParams, ms, ms],
  );
  const launches = await readRows<OpRow>(
    db,
    `SELECT o.id, o.workspace_id, o.task_id, o.state, o.result_event_id, c.updated_at AS since
       FROM task_launch_dispatch_claims c JOIN task_creation_operations o ON o.id = c.creation_operation_id
      WHERE c.state = 'unknown' AND c.deletion_operation_id IS NULL ${scope}
        AND c.updated_at <= ${sinceSql(db)}
      ORDER BY c.updated_at LIMIT ${limit}`,
    [...scopeParams, ms],
  );
  const out: StuckOperation[] = [];
  for (const op of unfinished) out.push(await describe(db, op, null));
  for (const op of launches) out.push(await describe(db, op, 'unknown'));
  return out.slice(0, limit);
}

/** Stuck operations by the action they wait for (the reaper's gauge). */
export function countByAction(stuck: readonly StuckOperation[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of stuck) out.set(s.action ?? 'none', (out.get(s.action ?? 'none') ?? 0) + 1);
  return out;
}
