/**
 * chooseRecoveryAction against an independent oracle: the spec's "Locked
 * condition | Legal action" rows restated here as separate predicates, plus
 * the protocol invariants the function rejects as creation_state_conflict.
 * Pure (no database); runs once per dialect project.
 *
 * Generated spaces (every combination inside each; 4,269,040 snapshots):
 *  A. every step list — 0, 1 or 2 non-launch steps (each over the six states
 *     legal for non-launch kinds x all seven compensation states; pairs
 *     unordered, 903) x launch intent absent or present (its seven legal
 *     states x all seven compensation states) — x every operation state x
 *     releaseUnfinished x phaseBCommitted, dispatch absent (946,000);
 *  B. every present dispatch variant (seven states x fence x three proofs)
 *     x every operation state x both flags x every step list with 0 or 1
 *     non-launch step, launch as above (1,806,000);
 *  C. every present dispatch variant x every operation state x both flags x
 *     every unordered pair of non-launch steps x launch absent or armed
 *     (1,517,040);
 *  plus every pair in both row orders (launch intent last, then first) for
 *  every operation state, which must not change the decision.
 * The full cross product of all axes is ~40 million snapshots (unordered
 * pairs; over a minute per project). A-C leave out only a present dispatch
 * together with two non-launch steps and a launch intent that is neither
 * absent nor armed; every other combination of the axes is generated.
 */
import { describe, expect, it } from 'vitest';
import {
  chooseRecoveryAction,
  NO_ACTION_REASONS,
  type RecoveryDecision,
  type RecoverySnapshot,
} from '../../src/runtime/recovery-action';
import { abortBlocker } from '../../src/store/abort';
import { nonLaunchStepsReady } from '../../src/store/step-rows';
import type { StepRow } from '../../src/store/types';
import {
  COMPENSATION_STATES,
  DISPATCH_STATES,
  OPERATION_STATES,
  RECOVERY_ACTIONS,
  STEP_STATES,
  type CompensationState,
  type RecoveryAction,
  type StepKind,
  type StepState,
} from '../../src/domain/vocab';

type Step = RecoverySnapshot['steps'][number];
type Dispatch = RecoverySnapshot['dispatch'];

// ---------------------------------------------------------------- oracle ---

const isLaunch = (x: Step): boolean => x.kind === 'launch_intent';
const terminal = (s: RecoverySnapshot): boolean => s.operationState === 'completed' || s.operationState === 'aborted';
const preparing = (s: RecoverySnapshot): boolean => s.operationState === 'preparing';

/**
 * What the table reads from a step list, each fact stated on its own. Step
 * lists are shared by many snapshots, so the facts are computed once per list.
 */
interface StepFacts {
  /** Step or compensation unknown (compensation unknown is treated as a step unknown). */
  unknown: boolean;
  /** Step or compensation running (a live claim). */
  running: boolean;
  /** Compensation required or retry_wait. */
  compensationPending: boolean;
  failed: boolean;
  launchArmed: boolean;
  launchOmittedOrArmed: boolean;
  allNonLaunchSucceeded: boolean;
  resumable: boolean;
  /** The Complete predicate (the Store's verifyCompletePredicate, states only). */
  complete: boolean;
  /** Every effect is absent (planned / retry_wait / failed), compensated or transferred. */
  effectsAccounted: boolean;
  /** Invariants that hold for every operation state. */
  structurallyValid: boolean;
  /** Invariants of non-terminal operations. */
  validWhileNonTerminal: boolean;
  /** The Store's own predicates, for cross-checking. */
  storeAbortAccepts: boolean;
  storeNonLaunchReady: boolean;
}

function computeFacts(steps: Step[]): StepFacts {
  const nonLaunch = steps.filter((x) => !isLaunch(x));
  const launches = steps.filter(isLaunch);
  const failed = steps.some((x) => x.state === 'failed');
  const launchArmed = launches.some((x) => x.state === 'armed');
  const launchOmittedOrArmed = launches.length === 0 || (launches.length === 1 && launches[0]!.state === 'armed');
  const allNonLaunchSucceeded = nonLaunch.every((x) => x.state === 'succeeded');
  const anyCompensation = steps.some((x) => x.compensationState !== 'none');
  const rows = steps.map((x) => ({ kind: x.kind, state: x.state, compensation_state: x.compensationState }) as StepRow);
  return {
    unknown: steps.some((x) => x.state === 'unknown' || x.compensationState === 'unknown'),
    running: steps.some((x) => x.state === 'running' || x.compensationState === 'running'),
    compensationPending: steps.some((x) => x.compensationState === 'required' || x.compensationState === 'retry_wait'),
    failed,
    launchArmed,
    launchOmittedOrArmed,
    allNonLaunchSucceeded,
    resumable: steps.some((x) => x.state === 'planned' || x.state === 'retry_wait'),
    complete: allNonLaunchSucceeded && launchOmittedOrArmed && !anyCompensation,
    effectsAccounted: steps.every((x) =>
      x.state === 'succeeded'
        ? x.compensationState === 'compensated' || x.compensationState === 'transferred'
        : x.state === 'planned' || x.state === 'retry_wait' || x.state === 'failed',
    ),
    structurallyValid:
      !nonLaunch.some((x) => x.state === 'armed' || x.state === 'cancelled') &&
      !launches.some((x) => x.state === 'succeeded') &&
      launches.length <= 1,
    validWhileNonTerminal:
      !launches.some((x) => x.state === 'cancelled') &&
      !(launchArmed && failed) &&
      !steps.some((x) => x.compensationState !== 'none' && (isLaunch(x) || x.state !== 'succeeded')) &&
      !(anyCompensation && !failed),
    storeAbortAccepts: rows.every((r) => abortBlocker(r) === null),
    storeNonLaunchReady: nonLaunchStepsReady(rows),
  };
}

const FACTS = new Map<Step[], StepFacts>();
function facts(steps: Step[]): StepFacts {
  let f = FACTS.get(steps);
  if (f === undefined) {
    f = computeFacts(steps);
    FACTS.set(steps, f);
  }
  return f;
}

/** Protocol invariants: a snapshot outside them must be a creation_state_conflict. */
function wellFormed(s: RecoverySnapshot, f: StepFacts): boolean {
  if (!f.structurallyValid) return false;
  if (s.dispatch !== null && s.operationState !== 'completed') return false;
  return terminal(s) || f.validWhileNonTerminal;
}

type Predicate = (s: RecoverySnapshot, f: StepFacts) => boolean;

/** The table, in priority order, each row's condition as the spec writes it. */
const ROWS: [RecoveryAction, Predicate][] = [
  ['reconcile_unknown_step', (s, f) => preparing(s) && f.unknown],
  ['retry_compensation', (s, f) => preparing(s) && !f.unknown && !f.running && f.compensationPending],
  [
    'complete_preparing',
    (s, f) =>
      preparing(s) &&
      f.allNonLaunchSucceeded &&
      !f.compensationPending &&
      !f.unknown &&
      !f.running &&
      f.launchOmittedOrArmed,
  ],
  [
    'abort_preparing',
    (s, f) =>
      preparing(s) &&
      !f.launchArmed &&
      !f.unknown &&
      !f.running &&
      !f.compensationPending &&
      f.failed &&
      f.effectsAccounted,
  ],
  [
    'resume_preparing',
    (s, f) =>
      preparing(s) && !f.unknown && !f.running && !f.compensationPending && !f.failed && f.resumable && !f.complete,
  ],
  [
    'retry_preparing_release',
    (s, f) => s.operationState === 'preparing-release' && s.releaseUnfinished && !f.unknown && !f.running,
  ],
  ['complete_completing', (s) => s.operationState === 'completing' && !s.phaseBCommitted],
  [
    'transfer_launch_dispatch',
    ({ dispatch: d }) => d !== null && d.deletionFence && (d.state === 'unknown' || d.state === 'running'),
  ],
  [
    'reconcile_launch_dispatch',
    ({ operationState, dispatch: d }) =>
      operationState === 'completed' && d?.state === 'unknown' && d.deletionFence === false && d.proof === 'runtime',
  ],
  [
    'retry_launch_dispatch',
    ({ operationState, dispatch: d }) =>
      operationState === 'completed' &&
      d?.state === 'unknown' &&
      d.deletionFence === false &&
      d.proof === 'no_dispatch',
  ],
];
ROWS.push([
  'replay_terminal',
  (s, f) => terminal(s) && ROWS.every(([action, holds]) => action === 'replay_terminal' || !holds(s, f)),
]);
const ROW_INDEX = new Map(ROWS.map(([action], i) => [action, i]));

/** Every property for one snapshot; returns a description of the first broken one. */
function check(s: RecoverySnapshot, seen: Set<string>): string | null {
  let decision: RecoveryDecision;
  try {
    decision = chooseRecoveryAction(s);
  } catch (err) {
    return `threw ${(err as Error).message}`;
  }
  // Determinism needs no second call: every branch below pins the decision
  // (action, or no-action reason) to the oracle's single answer for `s`.
  seen.add(decision.action ?? decision.reason);
  const f = facts(s.steps);
  const holding = ROWS.filter(([, holds]) => holds(s, f)).map(([a]) => a);

  if (decision.action === null) {
    if (!(NO_ACTION_REASONS as readonly string[]).includes(decision.reason)) return `unknown reason ${decision.reason}`;
    if (!wellFormed(s, f))
      return decision.reason === 'creation_state_conflict' ? null : 'ill-formed but not a conflict';
    if (holding.length > 0) return `no action although ${holding.join(', ')} holds`;
    const expected = preparing(s) && f.running && !f.unknown ? 'claim_in_flight' : 'creation_state_conflict';
    return decision.reason === expected ? null : `reason ${decision.reason}, expected ${expected}`;
  }

  const action = decision.action;
  if (!wellFormed(s, f)) return `${action} on a snapshot that violates a protocol invariant`;
  const index = ROW_INDEX.get(action);
  if (index === undefined) return `${action} is not in the table`;
  if (!ROWS[index]![1](s, f)) return `${action} chosen but its condition does not hold`;
  const earlier = ROWS.slice(0, index).find(([, holds]) => holds(s, f));
  if (earlier) return `${action} chosen although earlier ${earlier[0]} holds`;
  // The spec: within one locked snapshot the rows are mutually exclusive.
  if (holding.length !== 1) return `${holding.length} rows hold: ${holding.join(', ')}`;
  if (action === 'abort_preparing') {
    if (f.launchArmed) return 'abort_preparing with an armed launch intent';
    if (!f.storeAbortAccepts) return "abort_preparing but the Store's Abort predicate refuses";
  }
  if (action === 'complete_preparing') {
    if (!f.complete) return 'complete_preparing without the Complete predicate';
    if (!f.storeNonLaunchReady) return 'complete_preparing but a non-launch step is not ready';
  }
  if (action === 'replay_terminal' && !terminal(s)) return 'replay_terminal for a non-terminal operation';
  return null;
}

// ------------------------------------------------------------ generation ---

const NON_LAUNCH_STATES = STEP_STATES.filter((x) => x !== 'armed' && x !== 'cancelled');
const LAUNCH_STATES = STEP_STATES.filter((x) => x !== 'succeeded');
const step = (kind: StepKind, state: StepState, compensationState: CompensationState): Step => ({
  kind,
  state,
  compensationState,
});
const singles = (kind: StepKind): Step[] =>
  NON_LAUNCH_STATES.flatMap((st) => COMPENSATION_STATES.map((c) => step(kind, st, c)));
const FIRST = singles('fresh_branch_prepare');
const SECOND = singles('session_prepare');
const LAUNCH_VARIANTS: (Step | null)[] = [
  null,
  ...LAUNCH_STATES.flatMap((st) => COMPENSATION_STATES.map((c) => step('launch_intent', st, c))),
];
const DISPATCHES: NonNullable<Dispatch>[] = DISPATCH_STATES.flatMap((state) =>
  [false, true].flatMap((deletionFence) =>
    (['runtime', 'no_dispatch', null] as const).map((proof) => ({ state, deletionFence, proof })),
  ),
);

function withLaunch(lists: Step[][], variants: (Step | null)[]): Step[][] {
  return lists.flatMap((l) => variants.map((v) => (v === null ? l : [...l, v])));
}

/** Runs `check` over operation state x both flags x dispatches x step lists; returns [count, failures]. */
function sweep(dispatches: Dispatch[], stepLists: Step[][], seen: Set<string>): [number, string[]] {
  const failures: string[] = [];
  let n = 0;
  for (const operationState of OPERATION_STATES) {
    for (const releaseUnfinished of [false, true]) {
      for (const phaseBCommitted of [false, true]) {
        for (const dispatch of dispatches) {
          for (const steps of stepLists) {
            n++;
            const s: RecoverySnapshot = { operationState, releaseUnfinished, phaseBCommitted, dispatch, steps };
            const why = check(s, seen);
            if (why !== null && failures.length < 10) failures.push(`${why}: ${JSON.stringify(s)}`);
          }
        }
      }
    }
  }
  return [n, failures];
}

/** Every unordered pair of non-launch steps (42 x 43 / 2 = 903), kinds distinct. */
function unorderedPairs(): Step[][] {
  const pairs: Step[][] = [];
  for (let i = 0; i < FIRST.length; i++) for (let j = i; j < SECOND.length; j++) pairs.push([FIRST[i]!, SECOND[j]!]);
  return pairs;
}

describe('chooseRecoveryAction, exhaustively against the spec table', () => {
  const seen = new Set<string>();
  let total = 0;
  const ALL_LISTS = withLaunch([[], ...FIRST.map((a) => [a]), ...unorderedPairs()], LAUNCH_VARIANTS);

  it('A: every step list of 0-2 non-launch steps with or without a launch intent, every operation context', () => {
    expect(ALL_LISTS.length).toBe((1 + 42 + 903) * 50);
    const [n, failures] = sweep([null], ALL_LISTS, seen);
    total += n;
    expect(failures).toEqual([]);
  });

  it('B: every dispatch variant with every step list of 0-1 non-launch steps', () => {
    const lists = withLaunch([[], ...FIRST.map((a) => [a])], LAUNCH_VARIANTS);
    const [n, failures] = sweep(DISPATCHES, lists, seen);
    total += n;
    expect(failures).toEqual([]);
  });

  it('C: every dispatch variant with every pair of non-launch steps, launch intent absent or armed', () => {
    const launch = [null, step('launch_intent', 'armed', 'none')];
    const [n, failures] = sweep(DISPATCHES, withLaunch(unorderedPairs(), launch), seen);
    total += n;
    expect(failures).toEqual([]);
  });

  it('reaches every action and every no-action reason', () => {
    expect(total).toBe(20 * 47_300 + 20 * 42 * 2_150 + 20 * 42 * 903 * 2);
    expect([...seen].sort()).toEqual([...RECOVERY_ACTIONS, ...NO_ACTION_REASONS].sort());
  });

  it('the decision does not depend on the order of the step rows', () => {
    const differing: string[] = [];
    const key = (r: RecoveryDecision) => r.action ?? r.reason;
    for (const operationState of OPERATION_STATES) {
      for (const [a, b] of unorderedPairs() as [Step, Step][]) {
        for (const l of LAUNCH_VARIANTS) {
          // Reversal swaps the pair and moves the launch intent from last to first.
          const steps = l === null ? [a, b] : [a, b, l];
          const base = { operationState, releaseUnfinished: true, phaseBCommitted: false, dispatch: null };
          const forward = key(chooseRecoveryAction({ ...base, steps }));
          const reversed = key(chooseRecoveryAction({ ...base, steps: [...steps].reverse() }));
          if (forward !== reversed && differing.length < 10) differing.push(JSON.stringify({ ...base, steps }));
        }
      }
    }
    expect(differing).toEqual([]);
  });
});

// ---------------------------------------------------------- hand-written ---

const fb = (state: StepState, c: CompensationState = 'none') => step('fresh_branch_prepare', state, c);
const sp = (state: StepState, c: CompensationState = 'none') => step('session_prepare', state, c);
const li = (state: StepState, c: CompensationState = 'none') => step('launch_intent', state, c);

function snap(over: Partial<RecoverySnapshot>): RecoverySnapshot {
  return {
    operationState: 'preparing',
    steps: [],
    releaseUnfinished: false,
    phaseBCommitted: false,
    dispatch: null,
    ...over,
  };
}
const actionOf = (over: Partial<RecoverySnapshot>) => {
  const r = chooseRecoveryAction(snap(over));
  return r.action ?? r.reason;
};

describe('chooseRecoveryAction, one case per table row', () => {
  it('reconcile_unknown_step: preparing with an unknown step, even beside a live claim', () => {
    expect(actionOf({ steps: [fb('unknown'), sp('succeeded')] })).toBe('reconcile_unknown_step');
    expect(actionOf({ steps: [fb('unknown'), sp('running')] })).toBe('reconcile_unknown_step');
    expect(actionOf({ steps: [fb('failed'), sp('succeeded', 'unknown')] })).toBe('reconcile_unknown_step');
  });

  it('retry_compensation: a required or retry_wait compensation and nothing unknown or running', () => {
    expect(actionOf({ steps: [fb('failed'), sp('succeeded', 'required')] })).toBe('retry_compensation');
    expect(actionOf({ steps: [fb('succeeded', 'retry_wait'), li('failed')] })).toBe('retry_compensation');
    expect(actionOf({ steps: [fb('failed'), sp('succeeded', 'required'), li('running')] })).toBe('claim_in_flight');
  });

  it('complete_preparing: every non-launch step succeeded and the intent armed or omitted', () => {
    expect(actionOf({ steps: [fb('succeeded'), sp('succeeded'), li('armed')] })).toBe('complete_preparing');
    expect(actionOf({ steps: [fb('succeeded')] })).toBe('complete_preparing');
    expect(actionOf({ steps: [] })).toBe('complete_preparing');
  });

  it('abort_preparing: a permanent failure and every effect absent, compensated or transferred', () => {
    expect(actionOf({ steps: [fb('failed'), sp('succeeded', 'compensated'), li('planned')] })).toBe('abort_preparing');
    expect(actionOf({ steps: [fb('succeeded', 'transferred'), sp('retry_wait'), li('failed')] })).toBe(
      'abort_preparing',
    );
    // A succeeded effect left uncompensated after a failure breaks the winding-down invariant.
    expect(actionOf({ steps: [fb('failed'), sp('succeeded')] })).toBe('creation_state_conflict');
  });

  it('resume_preparing: a planned or retry_wait step, no failure, Complete not yet possible', () => {
    expect(actionOf({ steps: [fb('planned'), sp('succeeded')] })).toBe('resume_preparing');
    expect(actionOf({ steps: [fb('succeeded'), li('retry_wait')] })).toBe('resume_preparing');
    expect(actionOf({ steps: [fb('planned'), sp('running')] })).toBe('claim_in_flight');
  });

  it('retry_preparing_release: an unfinished release with nothing unknown or running', () => {
    expect(actionOf({ operationState: 'preparing-release', releaseUnfinished: true, steps: [fb('planned')] })).toBe(
      'retry_preparing_release',
    );
    expect(actionOf({ operationState: 'preparing-release', releaseUnfinished: false })).toBe('creation_state_conflict');
    expect(actionOf({ operationState: 'preparing-release', releaseUnfinished: true, steps: [fb('unknown')] })).toBe(
      'creation_state_conflict',
    );
  });

  it('complete_completing: phase B not yet committed', () => {
    const steps = [fb('succeeded'), li('armed')];
    expect(actionOf({ operationState: 'completing', steps })).toBe('complete_completing');
    expect(actionOf({ operationState: 'completing', steps, phaseBCommitted: true })).toBe('creation_state_conflict');
  });

  it('transfer_launch_dispatch: the deletion fence wins over any proof', () => {
    for (const proof of ['runtime', 'no_dispatch', null] as const) {
      for (const state of ['unknown', 'running'] as const) {
        expect(
          actionOf({
            operationState: 'completed',
            dispatch: { state, deletionFence: true, proof },
            steps: [li('armed')],
          }),
        ).toBe('transfer_launch_dispatch');
      }
    }
  });

  it('reconcile_launch_dispatch and retry_launch_dispatch: an unknown claim with proof', () => {
    const completed = (proof: 'runtime' | 'no_dispatch' | null) =>
      actionOf({ operationState: 'completed', dispatch: { state: 'unknown', deletionFence: false, proof } });
    expect(completed('runtime')).toBe('reconcile_launch_dispatch');
    expect(completed('no_dispatch')).toBe('retry_launch_dispatch');
    expect(completed(null)).toBe('replay_terminal');
  });

  it('replay_terminal: completed or aborted with nothing else to do', () => {
    expect(actionOf({ operationState: 'completed', steps: [fb('succeeded'), li('armed')] })).toBe('replay_terminal');
    expect(actionOf({ operationState: 'aborted', steps: [fb('failed')] })).toBe('replay_terminal');
    expect(
      actionOf({
        operationState: 'completed',
        dispatch: { state: 'succeeded', deletionFence: false, proof: 'runtime' },
      }),
    ).toBe('replay_terminal');
  });

  it('otherwise: no action, with the reason', () => {
    expect(actionOf({ steps: [fb('running'), sp('planned')] })).toBe('claim_in_flight');
    expect(actionOf({ steps: [fb('failed'), sp('succeeded', 'running')] })).toBe('claim_in_flight');
    const r = chooseRecoveryAction(snap({ steps: [fb('running')] }));
    expect(r).toMatchObject({ action: null, reason: 'claim_in_flight' });
  });
});

describe('chooseRecoveryAction, invariant violations are creation_state_conflict', () => {
  it.each<[string, Partial<RecoverySnapshot>]>([
    ['an armed intent beside a failed step', { steps: [fb('failed'), li('armed')] }],
    [
      'an armed intent beside a failed step, even with an unknown step',
      { steps: [fb('failed'), sp('unknown'), li('armed')] },
    ],
    ['a non-launch step armed', { steps: [fb('armed')] }],
    ['a non-launch step cancelled', { steps: [sp('cancelled')] }],
    ['a launch intent succeeded', { steps: [li('succeeded')] }],
    ['two launch intents', { steps: [li('planned'), li('planned')] }],
    ['a cancelled intent while preparing', { steps: [fb('failed'), li('cancelled')] }],
    ['compensation without a failure', { steps: [fb('succeeded', 'required'), li('armed')] }],
    ['compensation on a step that is not succeeded', { steps: [fb('failed', 'required')] }],
    ['compensation on a launch intent', { steps: [fb('failed'), li('planned', 'compensated')] }],
    [
      'a dispatch claim on a preparing operation',
      { steps: [fb('unknown')], dispatch: { state: 'unknown', deletionFence: true, proof: null } },
    ],
  ])('%s', (_name, over) => {
    expect(chooseRecoveryAction(snap(over))).toMatchObject({ action: null, reason: 'creation_state_conflict' });
  });

  it('terminal operations keep cancelled intents and compensations without conflict', () => {
    expect(actionOf({ operationState: 'aborted', steps: [fb('succeeded', 'transferred'), li('cancelled')] })).toBe(
      'replay_terminal',
    );
  });
});
