/**
 * RecoverTaskCreation, the runtime half: `recoverOperation` claims the one
 * legal RecoveryAction of an operation (`claimTaskCreationRecovery`, one
 * transaction under the operation lock), runs it OUTSIDE that transaction
 * (observation, compensation and Git/HTTP I/O never happen under a SQL lock),
 * then releases the claim (`finishTaskCreationRecovery`, compare-and-set on
 * recovery generation and owner).
 *
 * Actions, each through the Store method that re-verifies its own predicate:
 * - reconcile_unknown_step: observe every `unknown` step (the kind's
 *   `observe`, after its `removeUnrecorded` when it has one: an attachment
 *   claim's unrecorded copies), then resolve it only from that proof — present exactly →
 *   `succeeded` (`armed` for a launch intent), proven absent → `retry_wait`,
 *   anything else stays `unknown` for an operator. An `unknown` compensation
 *   is settled by re-running its kind's undo under a fresh compensation claim
 *   (`reconcileUnknownCompensation`: the undo observes first and acts only on
 *   exact ownership proof).
 * - retry_compensation: `runPendingCompensations` (src/compensation/run.ts).
 * - resume_preparing: re-sends the operation's wake-ups (needs queues).
 * - complete_preparing / complete_completing: CompleteTaskCreation as the
 *   operation's recovery actor (phase A then B, or phase B alone, or replay).
 * - abort_preparing: AbortTaskCreation, cause `step_failed_permanently`.
 * - retry_preparing_release: the apply of the operation's own release
 *   (`release_operation_id` at `release_generation`, store/release-apply.ts)
 *   for a releaser that died after its claim; the creation is `preparing`
 *   again afterwards (so the next round may resume or complete it).
 * - dispatch actions: nothing here (dispatch claims have their own pass,
 *   src/runtime/dispatch-recovery.ts).
 * - replay_terminal: never claimed (read-only).
 * A finished Complete or Abort is announced to waiting create requests.
 */
import { OUTBOX_QUEUE, type OutboxJob } from '../../queues/names';
import { reconcileUnknownCompensation } from '../compensation/reconcile';
import { runPendingCompensations, type CompensationRunReport } from '../compensation/run';
import { enqueueRunnable } from '../coordinator/enqueue';
import type { QueueSet } from '../coordinator/queues';
import { readRows } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import type { RecoveryAction } from '../domain/vocab';
import type { Logger } from '../log';
import type { StepHandlers } from '../steps/index';
import type { EffectDeps, StepHandler } from '../steps/types';
import { abortTaskCreation } from '../store/abort';
import { completeTaskCreation } from '../store/complete';
import { claimTaskCreationRecovery, finishTaskCreationRecovery, type RecoveryClaim } from '../store/recovery';
import { DEFAULT_LEASE_MS } from '../store/step-claims';
import { resolveTaskCreationStep } from '../store/step-results';
import { retryPreparingRelease } from './release-recovery';
import { STEP_COLUMNS } from '../store/step-rows';
import type { OperationAuthority, StepRow } from '../store/types';

export interface RecoverDeps {
  effects: EffectDeps;
  handlers: StepHandlers;
  queues: QueueSet | null;
  log: Logger;
  /** The recovery claim's owner (one per reaper / worker; at most 200 printable ASCII characters). */
  actor: string;
  /** Recovery lease; default the step lease. */
  leaseMs?: number;
}

export interface ReconcileCounts {
  succeeded: number;
  retry: number;
  stillUnknown: number;
}

export interface RecoveryOutcome {
  operationId: string;
  /** The action that ran under this call's claim, or null when none ran. */
  action: RecoveryAction | null;
  /** Why no action ran: the chooser's reason, `replay_terminal`, or a typed conflict (`stale_claim` when another claim is live). */
  skipped: 'claim_in_flight' | 'replay_terminal' | 'stale_claim' | 'creation_state_conflict' | 'error' | null;
  detail: string | null;
  /** The action changed the ledger, so another action may now be legal. */
  progressed: boolean;
  reconciled: ReconcileCounts;
  compensation: CompensationRunReport | null;
}

/** The abort cause recorded when recovery aborts a creation with a permanently failed step. */
export const RECOVERY_ABORT_CAUSE = 'step_failed_permanently';

function outcome(operationId: string, fields: Partial<RecoveryOutcome> = {}): RecoveryOutcome {
  return {
    operationId,
    action: null,
    skipped: null,
    detail: null,
    progressed: false,
    reconciled: { succeeded: 0, retry: 0, stillUnknown: 0 },
    compensation: null,
    ...fields,
  };
}

const auth = (claim: RecoveryClaim): OperationAuthority => ({
  kind: 'operation',
  operationId: claim.operationId,
  actor: claim.owner,
});

/** reconcile_unknown_step: observe (I/O, no transaction), then resolve from that proof only. */
async function reconcileUnknownSteps(deps: RecoverDeps, claim: RecoveryClaim, counts: ReconcileCounts): Promise<void> {
  const rows = await readRows<StepRow>(
    deps.effects.db,
    `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE operation_id = ? AND (state = 'unknown' OR compensation_state = 'unknown') ORDER BY id`,
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
      log.warn({ err }, 'could not observe an unknown step; it stays unknown');
      counts.stillUnknown++;
      continue;
    }
    if (observation.effect === 'conflict') {
      log.warn(
        { evidence: observation.evidence.observation },
        'unknown step: mixed, foreign or changed effect; left for an operator',
      );
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
      log.info({ resolved: to }, 'unknown step reconciled from observation');
    } catch (err) {
      if (!isTaskLedgerError(err)) throw err;
      log.warn({ code: err.code, detail: err.message }, 'unknown step not resolved');
      counts.stillUnknown++;
    }
  }
  if (compensationUnknown) {
    // Every kind's undo observes first and acts only on exact ownership proof, so it is its own
    // reconciliation: claimed `unknown -> running` (next compensation generation), then
    // compensated / transferred / retry_wait, or unknown again (src/compensation/reconcile.ts).
    const r = await reconcileUnknownCompensation(deps.effects, claim.operationId, claim.owner);
    counts.succeeded += r.compensated + r.transferred;
    counts.retry += r.retry;
    counts.stillUnknown += r.unknown;
    deps.log.info({ operation_id: claim.operationId, ...r }, 'unknown compensation reconciled by re-running its undo');
  }
}

/** Wakes requests waiting for this creation, and (after Complete) the workspace's outbox dispatcher. */
async function announceEnd(deps: RecoverDeps, claim: RecoveryClaim, completed: boolean): Promise<void> {
  const queues = deps.queues;
  if (!queues) return;
  const log = deps.log.child({ operation_id: claim.operationId });
  await queues.creationEvents
    .announce(claim.operationId)
    .catch((err: unknown) => log.warn({ err }, 'could not announce the ended creation; waiters will poll'));
  if (completed) {
    await queues
      .get(OUTBOX_QUEUE)
      .add('dispatch', { workspaceId: claim.workspaceId } satisfies OutboxJob, {
        jobId: `outbox-${claim.workspaceId}-${Date.now()}`,
      })
      .catch((err: unknown) => log.warn({ err }, 'could not wake the outbox dispatcher; the sweep will'));
  }
}

/** Runs the claimed action. Returns whether it changed the ledger. */
async function runAction(deps: RecoverDeps, claim: RecoveryClaim, out: RecoveryOutcome): Promise<boolean> {
  const db = deps.effects.db;
  switch (claim.action) {
    case 'reconcile_unknown_step':
      await reconcileUnknownSteps(deps, claim, out.reconciled);
      return out.reconciled.succeeded + out.reconciled.retry > 0;
    case 'retry_compensation': {
      const r = await runPendingCompensations(deps.effects, claim.operationId, claim.owner);
      out.compensation = r;
      return r.compensated + r.transferred + r.retry + r.unknown > 0;
    }
    case 'resume_preparing':
      if (deps.queues) await enqueueRunnable(db, deps.queues, claim.operationId, { replaceFailed: true });
      // Wake-ups change nothing in the ledger.
      return false;
    case 'complete_preparing':
    case 'complete_completing': {
      const r = await completeTaskCreation(db, auth(claim));
      deps.log.info(
        { operation_id: claim.operationId, outcome: r.outcome, event_id: r.eventId, replayed: r.replayed },
        'creation completed by recovery',
      );
      await announceEnd(deps, claim, true);
      return true;
    }
    case 'abort_preparing': {
      const r = await abortTaskCreation(db, auth(claim), RECOVERY_ABORT_CAUSE);
      deps.log.info(
        { operation_id: claim.operationId, cause: r.cause, replayed: r.replayed, cleanup_jobs: r.cleanupJobIds },
        'creation aborted by recovery',
      );
      await announceEnd(deps, claim, false);
      return true;
    }
    case 'retry_preparing_release':
      await retryPreparingRelease(deps.effects.db, deps.log, claim.operationId);
      // The creation is `preparing` again (by this apply or the releaser's): the next round may resume or complete it.
      return true;
    case 'reconcile_launch_dispatch':
    case 'retry_launch_dispatch':
    case 'transfer_launch_dispatch':
      // Dispatch claims are recovered by the reaper's own pass (src/runtime/dispatch-recovery.ts, which observes
      // with the launch workers' executor and re-chooses under lock); workspace deletion (the transfer) is not
      // built. Nothing to do under an operation claim.
      deps.log.warn({ operation_id: claim.operationId, action: claim.action }, 'not run under an operation claim');
      return false;
    case 'replay_terminal':
      return false;
  }
}

/** Claims, runs the single legal action, releases the claim. Never throws a TaskLedgerError. */
export async function recoverOperation(deps: RecoverDeps, operationId: string): Promise<RecoveryOutcome> {
  const log = deps.log.child({ operation_id: operationId, recovery_owner: deps.actor });
  let claimed;
  try {
    claimed = await claimTaskCreationRecovery(
      deps.effects.db,
      operationId,
      deps.actor,
      deps.leaseMs ?? DEFAULT_LEASE_MS,
    );
  } catch (err) {
    if (!isTaskLedgerError(err)) throw err;
    const skipped = err.code === 'stale_claim' || err.code === 'creation_state_conflict' ? err.code : 'error';
    if (skipped === 'stale_claim') log.debug({ detail: err.message }, 'another recovery claim is live');
    else log.warn({ code: err.code, detail: err.message }, 'no recovery action may run; zero writes');
    return outcome(operationId, { skipped, detail: `${err.code}: ${err.message}` });
  }
  if (!claimed.claimed) {
    const d = claimed.decision;
    return d.action === null
      ? outcome(operationId, { skipped: d.reason, detail: d.detail })
      : outcome(operationId, { skipped: 'replay_terminal' });
  }
  const claim: RecoveryClaim = claimed;
  const out = outcome(operationId, { action: claim.action });
  try {
    out.progressed = await runAction(deps, claim, out);
  } catch (err) {
    if (!isTaskLedgerError(err)) throw err;
    log.warn({ action: claim.action, code: err.code, detail: err.message }, 'recovery action refused by the Store');
    out.detail = `${err.code}: ${err.message}`;
  } finally {
    await finishTaskCreationRecovery(deps.effects.db, claim).catch((err: unknown) => {
      if (!isTaskLedgerError(err, 'stale_claim')) throw err;
      log.warn({ generation: claim.generation }, 'recovery claim was taken over before it was released');
    });
  }
  return out;
}

/** Why 4: the longest chain is reconcile → compensate → abort (or reconcile → complete); one spare round. */
export const MAX_RECOVERY_ROUNDS = 4;

/**
 * Recovers an operation until no action makes progress: e.g. reconcile an
 * unknown step, then Complete; or compensate, then Abort. Each round is one
 * `recoverOperation` (its own claim).
 */
export async function recoverUntilSettled(
  deps: RecoverDeps,
  operationId: string,
  maxRounds = MAX_RECOVERY_ROUNDS,
): Promise<RecoveryOutcome[]> {
  const outcomes: RecoveryOutcome[] = [];
  for (let round = 0; round < maxRounds; round++) {
    const out = await recoverOperation(deps, operationId);
    outcomes.push(out);
    if (!out.progressed) break;
  }
  return outcomes;
}
