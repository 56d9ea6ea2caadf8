/**
 * Runs an operation's pending compensations (`required`, or `retry_wait`
 * that is due by the database clock): claims each through
 * ClaimTaskCreationCompensation (a fenced `-> running` with a lease), runs
 * the kind's undo (src/kinds/<kind>/compensation.ts) — its I/O outside any
 * transaction — and the undo records `compensated|transferred|unknown|
 * retry_wait` through the Store. Launch intents are never compensated.
 *
 * A claim that lost a race (another runner, the operation moved on) is
 * skipped. An undo that could not record at all (database down, a crash
 * simulated by a failpoint) propagates: its compensation stays `running`,
 * the lease expires to `unknown`, and `reconcileUnknownCompensation`
 * (./reconcile.ts) runs the idempotent undo again.
 */
import { readRows } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { claimTaskCreationCompensation } from '../store/compensation';
import { renewTaskCreationCompensationLease } from '../store/compensation-lease';
import { DEFAULT_LEASE_MS } from '../store/step-claims';
import type { CompensationClaim, OperationAuthority } from '../store/types';
import type { EffectDeps } from '../kinds/contract';
import { kindModule } from '../kinds/registry';

export interface CompensationRunReport {
  compensated: number;
  transferred: number;
  retry: number;
  unknown: number;
}

export function emptyReport(): CompensationRunReport {
  return { compensated: 0, transferred: 0, retry: 0, unknown: 0 };
}

const SKIPPABLE = new Set(['stale_claim', 'creation_state_conflict', 'not_found']);

/** Runs one claimed compensation's undo and counts its outcome (a lost race counts nothing). */
export async function runClaimedUndo(
  deps: EffectDeps,
  claim: CompensationClaim,
  report: CompensationRunReport,
  leaseMs: number = DEFAULT_LEASE_MS,
): Promise<void> {
  const undo = kindModule(claim.kind).undo;
  if (undo === null) throw new Error(`${claim.kind} is never compensated`);
  const log = deps.log.child({ operation_id: claim.operationId, step_id: claim.stepId, kind: claim.kind });
  // Why lease/3: two renewals can be lost before the lease expires (as for step claims). A long Git undo
  // keeps its claim; a renewal that finds the claim stale stops, and the undo's own record then fails stale.
  const timer = setInterval(
    () => {
      renewTaskCreationCompensationLease(deps.db, claim, leaseMs).catch((err: unknown) => {
        // Only a stale claim ends the heartbeat; a passing database error is retried at the next beat.
        if (isTaskLedgerError(err, 'stale_claim')) clearInterval(timer);
        log.warn({ err }, 'compensation lease renewal failed; the reaper turns it unknown if it expires');
      });
    },
    Math.max(250, Math.floor(leaseMs / 3)),
  );
  try {
    const r = await undo(deps, claim);
    if (r.outcome === 'retry_wait') report.retry++;
    else report[r.outcome]++;
    log.info({ outcome: r.outcome, reason: r.reason, cleanup_job_id: r.cleanupJobId }, 'compensation recorded');
  } catch (err) {
    if (isTaskLedgerError(err) && err.code === 'stale_claim') {
      log.warn({ detail: err.message }, 'compensation claim went stale; nothing recorded');
      return;
    }
    throw err;
  } finally {
    clearInterval(timer);
  }
}

export async function runPendingCompensations(
  deps: EffectDeps,
  operationId: string,
  owner: string,
  leaseMs: number = DEFAULT_LEASE_MS,
  /** The authority the claims run under (recovery passes its claim's fence); default the operation's owner. */
  auth: OperationAuthority = { kind: 'operation', operationId, actor: owner },
): Promise<CompensationRunReport> {
  const report = emptyReport();
  const now = deps.db.dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)';
  const due = await readRows<{ kind: StepKind; step_key: string }>(
    deps.db,
    `SELECT kind, step_key FROM task_creation_steps
      WHERE operation_id = ? AND kind <> 'launch_intent'
        AND (compensation_state = 'required'
             OR (compensation_state = 'retry_wait' AND (next_attempt_at IS NULL OR next_attempt_at <= ${now})))
      ORDER BY id`,
    [operationId],
  );
  for (const step of due) {
    let claim: CompensationClaim;
    try {
      claim = await claimTaskCreationCompensation(
        deps.db,
        auth,
        { kind: step.kind, stepKey: step.step_key },
        owner,
        leaseMs,
      );
    } catch (err) {
      if (isTaskLedgerError(err) && SKIPPABLE.has(err.code)) continue;
      throw err;
    }
    await runClaimedUndo(deps, claim, report, leaseMs);
  }
  return report;
}
