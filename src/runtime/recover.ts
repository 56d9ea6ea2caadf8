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
import { runPendingCompensations, type CompensationRunReport } from '../compensation/run';
import { enqueueRunnable } from '../coordinator/enqueue';
import { isTaskLedgerError, isTransientError } from '../domain/errors';
import type { RecoveryAction } from '../domain/vocab';
import { abortTaskCreation } from '../store/abort';
import { completeTaskCreation } from '../store/complete';
import {
  claimTaskCreationRecovery,
  finishTaskCreationRecovery,
  renewTaskCreationRecovery,
  type RecoveryClaim,
} from '../store/recovery';
import { DEFAULT_LEASE_MS } from '../store/step-claims';
import { reconcileUnknownSteps } from './reconcile-steps';
import { auth, type ReconcileCounts, type RecoverDeps } from './recovery-context';
import { retryPreparingRelease } from './release-recovery';

export type { ReconcileCounts, RecoverDeps } from './recovery-context';

export interface RecoveryOutcome {
  operationId: string;
  /** The action that ran under this call's claim, or null when none ran. */
  action: RecoveryAction | null;
  /** Why no action ran: the chooser's reason, `replay_terminal`, or a typed conflict (`stale_claim` when another claim is live). */
  skipped: 'claim_in_flight' | 'replay_terminal' | 'stale_claim' | 'creation_state_conflict' | 'error' | null;
  detail: string | null;
  /**
   * The claim, the action or the claim's release failed on a database fault (`isTransientError`): nothing is
   * wrong with the operation, and the next sweep looks at it again (no back-off).
   */
  transient: boolean;
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
    transient: false,
    progressed: false,
    reconciled: { succeeded: 0, retry: 0, stillUnknown: 0 },
    compensation: null,
    ...fields,
  };
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
      const r = await runPendingCompensations(
        deps.effects,
        claim.operationId,
        claim.owner,
        DEFAULT_LEASE_MS,
        auth(claim),
      );
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
      // with the launch workers' executor and re-chooses under lock); a deletion transfers its claims in its own
      // transaction (ADR 0009). Nothing to do under an operation claim.
      deps.log.warn({ operation_id: claim.operationId, action: claim.action }, 'not run under an operation claim');
      return false;
    case 'replay_terminal':
      return false;
  }
}

/**
 * Claims, runs the single legal action, releases the claim. Never throws a TaskLedgerError.
 * `expectedAction` (the ledger view's button): run only if that is still the legal action; otherwise the claim's
 * typed `creation_state_conflict` comes back as `skipped`, zero writes.
 */
export async function recoverOperation(
  deps: RecoverDeps,
  operationId: string,
  options: { expectedAction?: RecoveryAction } = {},
): Promise<RecoveryOutcome> {
  const log = deps.log.child({ operation_id: operationId, recovery_owner: deps.actor });
  let claimed;
  try {
    claimed = await claimTaskCreationRecovery(
      deps.effects.db,
      operationId,
      deps.actor,
      deps.leaseMs ?? DEFAULT_LEASE_MS,
      { expectedAction: options.expectedAction },
    );
  } catch (err) {
    if (!isTaskLedgerError(err)) throw err;
    const skipped = err.code === 'stale_claim' || err.code === 'creation_state_conflict' ? err.code : 'error';
    const transient = isTransientError(err);
    if (skipped === 'stale_claim') log.debug({ detail: err.message }, 'another recovery claim is live');
    else if (transient)
      log.warn({ code: err.code, detail: err.message }, 'recovery claim not taken; the next sweep asks again');
    else log.warn({ code: err.code, detail: err.message }, 'no recovery action may run; zero writes');
    return outcome(operationId, { skipped, detail: `${err.code}: ${err.message}`, transient });
  }
  if (!claimed.claimed) {
    const d = claimed.decision;
    return d.action === null
      ? outcome(operationId, { skipped: d.reason, detail: d.detail })
      : outcome(operationId, { skipped: 'replay_terminal' });
  }
  const claim: RecoveryClaim = claimed;
  const out = outcome(operationId, { action: claim.action });
  // Why lease/3: as for step claims, two renewals may be lost before the claim expires; a renewal that finds the
  // claim stale stops, and the action's next Store call is refused (zero writes).
  const leaseMs = deps.leaseMs ?? DEFAULT_LEASE_MS;
  const heartbeat = setInterval(
    () => {
      renewTaskCreationRecovery(deps.effects.db, claim, leaseMs).catch((err: unknown) => {
        if (isTaskLedgerError(err, 'stale_claim')) clearInterval(heartbeat);
        log.warn({ err }, 'recovery lease renewal failed');
      });
    },
    Math.max(250, Math.floor(leaseMs / 3)),
  );
  try {
    out.progressed = await runAction(deps, claim, out);
  } catch (err) {
    if (!isTaskLedgerError(err)) throw err;
    out.transient = isTransientError(err);
    log.warn(
      { action: claim.action, code: err.code, detail: err.message },
      out.transient ? 'recovery action interrupted by a database fault' : 'recovery action refused by the Store',
    );
    out.detail = `${err.code}: ${err.message}`;
  } finally {
    clearInterval(heartbeat);
    await finishTaskCreationRecovery(deps.effects.db, claim).catch((err: unknown) => {
      // A release lost to a database fault leaves the claim to run out its lease; the next claim takes over then.
      if (isTransientError(err)) {
        out.transient = true;
        log.warn({ err }, 'recovery claim release not confirmed; its lease runs out');
        return;
      }
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
