/**
 * Reconciles compensation `unknown` (a compensation whose lease expired
 * while `running`: the undo may or may not have happened). Every kind's undo
 * observes the real effect first and acts only on exact ownership proof, so
 * it is its own reconciliation: `ClaimUnknownCompensation` fences `unknown ->
 * running` (next generation, new lease) and the undo runs again —
 * effect already gone -> only the rows are settled (`compensated`); effect
 * still exactly ours -> undone; touched or foreign -> `transferred` with
 * the proof; I/O failure -> `retry_wait`. Nothing is assumed.
 *
 * The reaper calls this for operations whose compensation is `unknown`.
 */
import { readRows } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { claimUnknownCompensation } from '../store/compensation';
import type { CompensationClaim, OperationAuthority } from '../store/types';
import type { EffectDeps } from '../kinds/contract';
import { emptyReport, runClaimedUndo, type CompensationRunReport } from './run';

export async function reconcileUnknownCompensation(
  deps: EffectDeps,
  operationId: string,
  owner: string,
  /** The authority the claims run under (recovery passes its claim's fence); default the operation's owner. */
  auth: OperationAuthority = { kind: 'operation', operationId, actor: owner },
): Promise<CompensationRunReport> {
  const report = emptyReport();
  const rows = await readRows<{ kind: StepKind; step_key: string }>(
    deps.db,
    `SELECT kind, step_key FROM task_creation_steps
      WHERE operation_id = ? AND compensation_state = 'unknown' AND kind <> 'launch_intent' ORDER BY id`,
    [operationId],
  );
  for (const step of rows) {
    let claim: CompensationClaim;
    try {
      claim = await claimUnknownCompensation(deps.db, auth, { kind: step.kind, stepKey: step.step_key }, owner);
    } catch (err) {
      if (isTaskLedgerError(err) && ['stale_claim', 'creation_state_conflict', 'not_found'].includes(err.code)) {
        continue;
      }
      throw err;
    }
    await runClaimedUndo(deps, claim, report);
  }
  return report;
}

/** Operations (still preparing) with a compensation `unknown`, for a sweep (plain read). */
export async function findUnknownCompensationOperations(
  deps: EffectDeps,
  limit = 200,
  workspaceId?: string,
): Promise<string[]> {
  const rows = await readRows<{ operation_id: string }>(
    deps.db,
    `SELECT DISTINCT s.operation_id FROM task_creation_steps s
      WHERE s.compensation_state = 'unknown'
        AND EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = s.operation_id AND o.state = 'preparing')
        ${workspaceId === undefined ? '' : 'AND s.workspace_id = ?'}
      LIMIT ${Math.max(1, Math.floor(limit))}`,
    workspaceId === undefined ? [] : [workspaceId],
  );
  return rows.map((r) => r.operation_id);
}
