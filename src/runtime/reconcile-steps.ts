/**
 * The `reconcile_unknown_step` RecoveryAction (run by runtime/recover.ts
 * under the operation's recovery claim): every `unknown` step that is due is
 * observed (its kind's read-only `observe`, I/O outside any transaction) and
 * decided from what the observation proves:
 * - `present_exact` -> `succeeded` (`armed` for a launch intent);
 * - `absent_proven` -> `retry_wait` (the step runs again with the same
 *   idempotency key; a contribution the provider says does not exist then
 *   fails permanently and the creation aborts);
 * - `conflict` (a proven contradiction: a foreign or changed effect) and
 *   `unobservable` (nothing could be read: a provider down or refusing our
 *   credentials, Git or the file system failing, an observe that threw) ->
 *   the step stays `unknown`, with the verdict and reason noted on it and its
 *   next look paced (store/step-notes.ts): visible in `ops show`, the API's
 *   operation view, a warn line and `taskledger_reconciliations_total{kind,verdict}`, and
 *   resolvable by an operator (docs/recovery.md).
 * An agent runtime found for a session before Complete is handed to a
 * cleanup job that stops it (store/pre-complete-runtime.ts); the step is
 * decided by a later look. A step not due yet (its note's `next_attempt_at`
 * is ahead) is left for its
 * time. An `unknown` compensation is settled by re-running its kind's undo
 * under a new compensation claim (compensation/reconcile.ts). Every Store call
 * carries the recovery claim, so a stale one writes nothing.
 */
import { reconcileUnknownCompensation } from '../compensation/reconcile';
import { readRows } from '../db/tx';
import { isTaskLedgerError, isTransientError } from '../domain/errors';
import type { StepHandler } from '../kinds/contract';
import type { RecoveryClaim } from '../store/recovery';
import { resolveTaskCreationStep } from '../store/step-results';
import { noteUnresolvedStep, type UnresolvedVerdict } from '../store/step-notes';
import { transferPreCompleteRuntime } from '../store/pre-complete-runtime';
import { STEP_COLUMNS } from '../store/step-rows';
import type { StepRow } from '../store/types';
import { auth, type ReconcileCounts, type RecoverDeps } from './recovery-context';

function dueSql(dialect: 'postgres' | 'mysql'): string {
  const now = dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)';
  return `((state = 'unknown' AND (next_attempt_at IS NULL OR next_attempt_at <= ${now})) OR compensation_state = 'unknown')`;
}

async function note(
  deps: RecoverDeps,
  claim: RecoveryClaim,
  step: StepRow,
  verdict: UnresolvedVerdict,
  reason: string,
): Promise<void> {
  const log = deps.log.child({ operation_id: step.operation_id, step_id: step.id, kind: step.kind });
  deps.metrics?.reconciliations.inc({ kind: step.kind, verdict });
  try {
    const n = await noteUnresolvedStep(
      deps.effects.db,
      auth(claim),
      { kind: step.kind, stepKey: step.step_key, generation: step.generation },
      verdict,
      reason,
    );
    log.warn(
      { verdict, reason: n.reason, observations: n.observations, since: n.first_observed_at },
      verdict === 'conflict'
        ? 'unknown step: the world contradicts the ledger; it waits for an operator (docs/recovery.md)'
        : 'unknown step: its effect cannot be observed now; looking again later',
    );
  } catch (err) {
    if (!isTaskLedgerError(err)) throw err;
    log.warn({ code: err.code, detail: err.message }, 'unknown step moved on before it was noted');
  }
}

export async function reconcileUnknownSteps(
  deps: RecoverDeps,
  claim: RecoveryClaim,
  counts: ReconcileCounts,
): Promise<void> {
  const rows = await readRows<StepRow>(
    deps.effects.db,
    `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE operation_id = ? AND ${dueSql(deps.effects.db.dialect)} ORDER BY id`,
    [claim.operationId],
  );
  let compensationUnknown = false;
  for (const raw of rows) {
    const step: StepRow = {
      ...raw,
      generation: Number(raw.generation),
      attempt: Number(raw.attempt),
      compensation_generation: Number(raw.compensation_generation),
    };
    const log = deps.log.child({ operation_id: step.operation_id, step_id: step.id, kind: step.kind });
    if (step.state !== 'unknown') {
      // D2: an expired compensation lease; settled below by re-running the kind's undo under a new claim.
      compensationUnknown = true;
      continue;
    }
    const handler = deps.handlers[step.kind] as StepHandler;
    let observation;
    try {
      // What a dead worker provably left without a record is removed first (e.g. an attachment claim's copies).
      if (handler.removeUnrecorded) await handler.removeUnrecorded(deps.effects, step, auth(claim));
      observation = await handler.observe(deps.effects, step);
    } catch (err) {
      // A database fault says nothing about the effect: the action ends as interrupted and the next sweep looks.
      if (isTransientError(err)) throw err;
      await note(deps, claim, step, 'unobservable', `observe failed: ${(err as Error).message ?? String(err)}`);
      counts.stillUnknown++;
      continue;
    }
    if (observation.effect === 'conflict' || observation.effect === 'unobservable') {
      const why = (observation.evidence.observation as { reason?: unknown }).reason;
      let reason = typeof why === 'string' ? why : observation.effect;
      if (observation.effect === 'conflict' && (step.kind === 'launch_intent' || step.kind === 'session_prepare')) {
        // An agent runtime before Complete is never ours to keep: it goes to a cleanup job that stops it.
        const moved = await transferPreCompleteRuntime(deps.effects.db, auth(claim), step.step_key).catch(
          (err: unknown) => {
            if (!isTaskLedgerError(err)) throw err;
            return null;
          },
        );
        if (moved) reason = `${reason}; the runtime is handed to cleanup job ${moved.jobId}, which stops it`;
      }
      await note(deps, claim, step, observation.effect, reason);
      counts.stillUnknown++;
      continue;
    }
    try {
      const to = await resolveTaskCreationStep(
        deps.effects.db,
        auth(claim),
        { kind: step.kind, stepKey: step.step_key },
        {
          resolution: observation.effect === 'present_exact' ? 'succeeded' : 'retry_wait',
          evidence: observation.evidence,
          observedGeneration: step.generation,
        },
      );
      if (to === 'retry_wait') counts.retry++;
      else counts.succeeded++;
      deps.metrics?.reconciliations.inc({ kind: step.kind, verdict: observation.effect });
      log.info({ resolved: to }, 'unknown step reconciled from observation');
    } catch (err) {
      if (!isTaskLedgerError(err) || isTransientError(err)) throw err;
      log.warn({ code: err.code, detail: err.message }, 'unknown step not resolved');
      counts.stillUnknown++;
    }
  }
  if (compensationUnknown) {
    // Every kind's undo observes first and acts only on exact ownership proof, so it is its own
    // reconciliation: claimed `unknown -> running` (next compensation generation), then
    // compensated / transferred / retry_wait, or unknown again (src/compensation/reconcile.ts).
    const r = await reconcileUnknownCompensation(deps.effects, claim.operationId, claim.owner, auth(claim));
    counts.succeeded += r.compensated + r.transferred;
    counts.retry += r.retry;
    counts.stillUnknown += r.unknown;
    deps.log.info({ operation_id: claim.operationId, ...r }, 'unknown compensation reconciled by re-running its undo');
  }
}
