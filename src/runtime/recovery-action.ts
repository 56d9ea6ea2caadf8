/**
 * RecoveryAction choice: a PURE function from a locked snapshot of one
 * creation operation to the single legal `RecoveryAction`, or to "no action"
 * with a reason. No I/O, no clock, no randomness: the caller loads the
 * snapshot under the operation lock (spec: "predicates are evaluated under one
 * operation lock"), and the Store re-verifies every hash and proof when the
 * chosen action runs, so this function decides only *which* action may run.
 *
 * Rows of the spec's "Locked condition | Legal action" table, first match
 * wins, in this order:
 *
 *  1. `preparing`, any step unknown (or any compensation unknown, see D2)
 *                                                   -> reconcile_unknown_step
 *  2. `preparing`, no unknown/running, a compensation `required|retry_wait`
 *                                                   -> retry_compensation
 *  3. `preparing`, every non-launch step succeeded, no pending compensation,
 *     launch intent omitted or `armed`              -> complete_preparing
 *  4. `preparing`, launch intent not armed, no unknown/running/pending
 *     compensation, >= 1 failed step, every effect absent/compensated/
 *     transferred                                   -> abort_preparing
 *  5. `preparing`, no unknown/running/pending compensation, zero failed
 *     steps, a `planned|retry_wait` step exists, Complete predicate false
 *                                                   -> resume_preparing
 *  6. `preparing-release`, release unfinished, no unknown/running
 *                                                   -> retry_preparing_release
 *  7. `completing`, phase B not committed           -> complete_completing
 *  8. deletion fence owns an unknown/running dispatch -> transfer_launch_dispatch
 *  9. `completed`, dispatch unknown, no fence, runtime proof
 *                                                   -> reconcile_launch_dispatch
 * 10. `completed`, dispatch unknown, no fence, no-dispatch proof
 *                                                   -> retry_launch_dispatch
 * 11. `completed|aborted`, nothing above            -> replay_terminal
 * 12. otherwise: `{ action: null, reason }`.
 *
 * Within well-formed snapshots (below) the rows are mutually exclusive, as the
 * spec claims; the order only matters as documentation and is exercised by
 * the exhaustive test.
 *
 * Decisions the spec leaves implicit:
 *
 * D1 "running" means a LIVE claim. The reaper turns an expired step or
 *    compensation lease into `unknown` before recovery is chosen (spec:
 *    "running with expired lease becomes unknown, never assumed failed"), so a
 *    `running` step here belongs to a worker that may still finish: nothing
 *    may run beside it (reason `claim_in_flight`), except row 1, which the
 *    spec does not gate on running — reconciling one unknown step is
 *    independent of another step's live claim.
 * D2 A compensation `unknown` (an expired compensation lease) is treated as a
 *    step `unknown`: it counts for row 1 (`reconcile_unknown_step` reconciles
 *    the step's compensation by the same kind-specific matrix) and as
 *    "unknown" wherever a row says "no unknown". The spec says "step or
 *    compensation unknown blocks Complete and Abort"; the Store's
 *    COMPENSATION_PENDING set includes it as well.
 * D3 A compensation `running` counts as "running" (D1) wherever a row says
 *    "no unknown/running"; "compensation pending" in rows 2-5 means
 *    `required|retry_wait` (the claimable states). Rows 3-5 also need no
 *    unknown/running compensation, which D2/D3 already exclude.
 * D4 "Permanent failed step" is any step in state `failed` (failure is
 *    terminal; a transient failure is `retry_wait`). The launch intent
 *    counts: a failed launch intent makes the operation abort.
 * D5 "Every effect absent/compensated/transferred" (row 4) is exactly the
 *    Store's `abortBlocker`: `planned|retry_wait|failed` steps are absent
 *    (ADR 0003: `retry_wait` and `failed` carry `absent_proven`); a
 *    `succeeded` step counts only with compensation `compensated` or
 *    `transferred`; `armed`, `cancelled`, `unknown`, `running` never count.
 * D6 The Complete predicate (rows 3 and 5) is the Store's
 *    `verifyCompletePredicate` restricted to states: every non-launch step
 *    `succeeded`, the launch intent absent or `armed`, and every compensation
 *    `none` (an undone or transferred effect is not present). "Launch
 *    omitted" means no launch-intent row: the snapshot is assumed to hold
 *    exactly the plan's rows (the Store checks that with `verifyStepSet`).
 * D7 A "resumable planned/retryable step" (row 5) is any step, launch intent
 *    included, in `planned|retry_wait`; the Store orders the launch claim
 *    after the others (PreLaunchArmPredicate).
 * D8 Dispatch rows (8-10) read only the snapshot's `dispatch`, which exists
 *    only for `completed` operations. The deletion fence is evaluated before
 *    proof (spec: "Workspace-deletion ownership is evaluated before dispatch
 *    proof"), so a fenced claim is transferred even with runtime proof. A
 *    completed operation whose dispatch is `unknown` without any proof, or
 *    `running` under a live claim, matches no dispatch row and falls through
 *    to row 11 as written: `replay_terminal` is read-only, so it cannot hide
 *    the unknown claim; the next observation supplies the proof.
 *
 * Invariant violations (spec: "An invariant violation returns a typed
 * creation_state_conflict with zero writes rather than silently cancelling or
 * launching"). These are checked BEFORE the table, so no mutating row ever
 * acts on a state the protocol cannot reach; each yields
 * `{ action: null, reason: 'creation_state_conflict' }`:
 *
 *  V1 a non-launch step `armed` or `cancelled` (legal only for launch_intent);
 *  V2 more than one launch intent (a plan has exactly one or none);
 *  V3 a launch intent `succeeded` (an exact intent is `armed`; the Store
 *     refuses to complete a launch intent);
 *  V4 a dispatch claim on an operation that is not `completed` (claims are
 *     inserted only for completed operations);
 *  and, for the non-terminal states `preparing|preparing-release|completing`:
 *  V5 a `cancelled` launch intent (only workspace deletion cancels, in the
 *     same transaction that makes the operation terminal);
 *  V6 an `armed` launch intent together with a `failed` step (the coordinator
 *     rejects any permanent failure after arming);
 *  V7 a compensation other than `none` on a step that is not a `succeeded`
 *     non-launch step (only succeeded effects are ever marked `required`, and
 *     a succeeded step never changes state);
 *  V8 a compensation other than `none` while no step is `failed` (ADR 0003:
 *     compensation is required only by a permanent failure, which is
 *     terminal) — without this, row 2 would undo an operation that could
 *     still complete.
 * Contradictory operation fields are conflicts too, via "otherwise":
 * `preparing-release` whose release already finished (its commit returns the
 * operation to `preparing`), `completing` whose phase B already committed
 * (phase B makes the operation `completed` in the same transaction), and
 * `preparing-release` with a step or compensation unknown/running (the
 * release claim requires none, and nothing claims or expires leases while
 * the release runs).
 *
 * `releaseUnfinished` is read only for `preparing-release`, `phaseBCommitted`
 * only for `completing`.
 */
import type {
  CompensationState,
  DispatchState,
  OperationState,
  RecoveryAction,
  StepKind,
  StepState,
} from '../domain/vocab';

export interface RecoverySnapshot {
  operationState: OperationState;
  steps: { kind: StepKind; state: StepState; compensationState: CompensationState }[];
  /** preparing-release: the release operation has not finished. */
  releaseUnfinished: boolean;
  /** completing: phase B's result is already committed (result_event_id set). */
  phaseBCommitted: boolean;
  /** The launch dispatch claim of a completed operation, if any. */
  dispatch: null | { state: DispatchState; deletionFence: boolean; proof: 'runtime' | 'no_dispatch' | null };
}

/** Why no action runs: an invariant violation (typed conflict, zero writes), or a live claim to wait for. */
export const NO_ACTION_REASONS = ['creation_state_conflict', 'claim_in_flight'] as const;
export type NoActionReason = (typeof NO_ACTION_REASONS)[number];

export type RecoveryDecision = { action: RecoveryAction } | { action: null; reason: NoActionReason; detail: string };

const NON_TERMINAL: ReadonlySet<OperationState> = new Set(['preparing', 'preparing-release', 'completing']);

/** Everything the table reads from the step list, gathered in one pass. */
interface StepFacts {
  launches: number;
  /** V1: a non-launch step armed or cancelled. */
  nonLaunchArmedOrCancelled: boolean;
  /** V3 */
  launchSucceeded: boolean;
  launchArmed: boolean;
  launchCancelled: boolean;
  /** V7 */
  misplacedCompensation: boolean;
  anyCompensation: boolean;
  /** D2: step or compensation unknown. */
  unknown: boolean;
  /** D1/D3: step or compensation running. */
  running: boolean;
  /** D3: compensation required|retry_wait. */
  pending: boolean;
  /** D4 */
  failed: boolean;
  /** D7 */
  resumable: boolean;
  allNonLaunchSucceeded: boolean;
  /** D5 */
  effectsAccounted: boolean;
}

function stepFacts(steps: RecoverySnapshot['steps']): StepFacts {
  const f: StepFacts = {
    launches: 0,
    nonLaunchArmedOrCancelled: false,
    launchSucceeded: false,
    launchArmed: false,
    launchCancelled: false,
    misplacedCompensation: false,
    anyCompensation: false,
    unknown: false,
    running: false,
    pending: false,
    failed: false,
    resumable: false,
    allNonLaunchSucceeded: true,
    effectsAccounted: true,
  };
  for (const { kind, state, compensationState: comp } of steps) {
    if (kind === 'launch_intent') {
      f.launches++;
      if (state === 'succeeded') f.launchSucceeded = true;
      else if (state === 'armed') f.launchArmed = true;
      else if (state === 'cancelled') f.launchCancelled = true;
      if (comp !== 'none') f.misplacedCompensation = true;
    } else {
      if (state === 'armed' || state === 'cancelled') f.nonLaunchArmedOrCancelled = true;
      if (state !== 'succeeded') {
        f.allNonLaunchSucceeded = false;
        if (comp !== 'none') f.misplacedCompensation = true;
      }
    }
    if (comp !== 'none') f.anyCompensation = true;
    if (state === 'unknown' || comp === 'unknown') f.unknown = true;
    if (state === 'running' || comp === 'running') f.running = true;
    if (comp === 'required' || comp === 'retry_wait') f.pending = true;
    if (state === 'failed') f.failed = true;
    if (state === 'planned' || state === 'retry_wait') f.resumable = true;
    // D5: planned|retry_wait|failed are absent; succeeded needs compensated|transferred; nothing else counts.
    const accounted =
      state === 'succeeded'
        ? comp === 'compensated' || comp === 'transferred'
        : state === 'planned' || state === 'retry_wait' || state === 'failed';
    if (!accounted) f.effectsAccounted = false;
  }
  return f;
}

/** V1-V8, or null when the snapshot is reachable by the protocol. Details are constant strings. */
function invariantViolation(s: RecoverySnapshot, f: StepFacts): string | null {
  if (f.nonLaunchArmedOrCancelled) return 'V1: a non-launch step is armed or cancelled';
  if (f.launches > 1) return 'V2: more than one launch intent';
  if (f.launchSucceeded) return 'V3: a launch intent is succeeded; an exact intent is armed';
  if (s.dispatch !== null && s.operationState !== 'completed') {
    return 'V4: a dispatch claim exists for an operation that is not completed';
  }
  if (!NON_TERMINAL.has(s.operationState)) return null;
  if (f.launchCancelled) return 'V5: a launch intent is cancelled while the operation is not terminal';
  if (f.launchArmed && f.failed) return 'V6: an armed launch intent beside a permanently failed step';
  if (f.misplacedCompensation) return 'V7: compensation on a step that is not a succeeded non-launch step';
  if (f.anyCompensation && !f.failed) return 'V8: compensation without a permanently failed step';
  return null;
}

const conflict = (detail: string): RecoveryDecision => ({ action: null, reason: 'creation_state_conflict', detail });

export function chooseRecoveryAction(s: RecoverySnapshot): RecoveryDecision {
  const f = stepFacts(s.steps);
  const violation = invariantViolation(s, f);
  if (violation !== null) return conflict(violation);

  switch (s.operationState) {
    case 'preparing': {
      const launchOmittedOrArmed = f.launches === 0 || f.launchArmed;
      // D6; V8 already makes "every compensation none" follow from "no failed step".
      const completePredicate = f.allNonLaunchSucceeded && launchOmittedOrArmed && !f.anyCompensation;
      const quiet = !f.running && !f.pending; // with !unknown below: no unknown/running/pending compensation
      if (f.unknown) return { action: 'reconcile_unknown_step' };
      if (!f.running && f.pending) return { action: 'retry_compensation' };
      if (quiet && f.allNonLaunchSucceeded && launchOmittedOrArmed) return { action: 'complete_preparing' };
      if (quiet && !f.launchArmed && f.failed && f.effectsAccounted) return { action: 'abort_preparing' };
      if (quiet && !f.failed && f.resumable && !completePredicate) return { action: 'resume_preparing' };
      if (f.running) {
        return { action: null, reason: 'claim_in_flight', detail: 'a step or compensation runs under a live claim' };
      }
      return conflict(
        f.failed
          ? 'a step failed permanently but an effect is neither absent, compensated nor transferred'
          : 'a preparing operation matches no recovery condition',
      );
    }
    case 'preparing-release':
      if (!s.releaseUnfinished) return conflict('preparing-release but its release already finished');
      if (f.unknown || f.running) return conflict('a step is unknown or running during an external-ID release');
      return { action: 'retry_preparing_release' };
    case 'completing':
      if (s.phaseBCommitted) return conflict('completing but phase B already committed its result');
      return { action: 'complete_completing' };
    case 'completed':
    case 'aborted': {
      const d = s.dispatch;
      if (d !== null && d.deletionFence && (d.state === 'unknown' || d.state === 'running')) {
        return { action: 'transfer_launch_dispatch' };
      }
      if (s.operationState === 'completed' && d !== null && d.state === 'unknown' && !d.deletionFence) {
        if (d.proof === 'runtime') return { action: 'reconcile_launch_dispatch' };
        if (d.proof === 'no_dispatch') return { action: 'retry_launch_dispatch' };
      }
      return { action: 'replay_terminal' };
    }
  }
}
