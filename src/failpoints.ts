/**
 * Named failpoints (DBOS "debug point" style): fixed places in the protocol
 * where a test can make the process throw, exit, hang or run a callback, to
 * prove that recovery handles a crash or a race at exactly that boundary.
 *
 * `await failpoint(name, context)` is inert unless that name is armed: one
 * counter read and an already-resolved promise. Arm in-process with
 * `armFailpoint`, or, for a child process that a crash test spawns, with the
 * environment variable read once when this module loads:
 *
 *   TASKLEDGER_FAILPOINTS="after_effect_before_record=exit:kind=fresh_branch_prepare,between_complete_phase_a_and_b=exit"
 *
 * Grammar: entries separated by `,`; an entry is `name=action` followed by
 * `:key=value` parameters. Actions: `throw`, `exit`, `hang` (`call` needs a
 * function, so it is in-process only). Reserved parameters: `times=N` (fire
 * at most N times) and `code=N` (exit code, `exit` only). Every other
 * `key=value` matches the failpoint's context: the entry fires only when
 * the context has every such key and `String(context[key]) === value`. Whitespace around tokens
 * is ignored. A malformed value or an unknown name throws at load, so a typo
 * fails the child loudly instead of silently testing nothing.
 */

/** The closed list of failpoints; each names the race or crash it exposes. */
export const FAILPOINT_NAMES = [
  /**
   * A step claim (`planned|retry_wait -> running`, lease) has committed but
   * the worker has not begun the effect: a crash here leaves a `running` step
   * with no effect, whose expired lease must become `unknown` and reconcile
   * to absent/retry, never to failed or succeeded.
   */
  'after_step_claim_commit',
  /**
   * The external effect (provider call, Git worktree, file copy) happened but
   * its success was not recorded: the classic lost-ack window. Recovery must
   * observe the effect and resolve `unknown -> succeeded` by proof, and a
   * retried step must reuse the idempotency key / ownership marker instead
   * of creating a second effect.
   */
  'after_effect_before_record',
  /**
   * A step whose effect lives only in the ledger (workspace attachment,
   * session prepare, launch intent) has been claimed, performed and recorded
   * inside its one transaction, which has not committed
   * (store/ledger-step.ts): a crash here rolls all of it back, so the step is
   * exactly as it was (planned or retry_wait, same generation) with no lease
   * to expire and nothing to reconcile; the next wake-up simply runs it.
   * It fires too after an effect's record that opened such a batch (ADR
   * 0041, `kind` the effect's): a crash there leaves the effect's step
   * `running` under its lease, as a crash before its own record's COMMIT.
   */
  'before_ledger_step_commit',
  /**
   * Complete's phase A committed `preparing -> completing` but phase B has
   * not run: the operation must be finished by `complete_completing`
   * (idempotent phase B), and a concurrent caller must replay, not emit a
   * second `task.created`.
   */
  'between_complete_phase_a_and_b',
  /**
   * Phase B committed `task.created` to the outbox but the dispatcher has not
   * delivered it: delivery must still happen exactly once (at-least-once
   * delivery, deduplicated by event id) after a restart or a Redis flush.
   */
  'after_complete_before_outbox_delivery',
  /**
   * The launch dispatch claim (`planned|retry_wait -> running`) committed but
   * the runtime was not started: the claim's lease expires to `unknown`, and
   * only authenticated no-dispatch proof may retry it (no double launch);
   * racing workspace deletion must transfer it.
   */
  'after_dispatch_claim_before_runtime_start',
  /**
   * A compensation claim (`required|retry_wait -> running`) is held while the
   * undo is in progress: a crash here leaves compensation `running`, whose
   * expiry becomes `unknown` and blocks Abort until reconciled.
   */
  'during_compensation',
  /**
   * Begin's transaction committed (task row `preparing`, steps `planned`) but
   * no worker job was enqueued: only the ledger sweep can wake the operation,
   * so losing Redis jobs must never strand a creation.
   */
  'after_begin_commit_before_enqueue',
  /**
   * A workspace deletion was accepted (workspace `deleting`, deletion
   * `running`) but its cascade job was not enqueued: the reaper's sweep must
   * run it from the ledger, and asking again must answer the same deletion.
   */
  'after_workspace_deletion_accept',
  /**
   * The cascade committed one creation's deletion or abort and stops before
   * the next: a rerun must handle each remaining creation once, never a
   * creation twice (no second task.deleted, no second cleanup job).
   */
  'workspace_deletion_between_creations',
  /**
   * Every creation is handled but the workspace is not yet `deleted`: a
   * rerun must finish it, with the counts unchanged.
   */
  'workspace_deletion_before_finish',
  /**
   * An external-ID release claimed its preparing holder (`preparing ->
   * preparing-release`, release row `running`) but the apply has not run:
   * the holder still has its ID and nothing may claim its steps, Complete or
   * Abort it; the reaper's `retry_preparing_release` must apply that same
   * release (context: `operationId`, `releaseId`).
   */
  'between_release_claim_and_apply',
] as const;
export type FailpointName = (typeof FAILPOINT_NAMES)[number];

/** Facts about the call site a `match` predicate can select on (e.g. `{ kind: 'fresh_branch_prepare' }`). */
export type FailpointContext = Readonly<Record<string, string | number | boolean | null | undefined>>;

export type FailpointAction =
  /** Throw a FailpointError from the failpoint (the caller's error path runs). */
  | { kind: 'throw' }
  /** `process.exit(code)`: no `finally`, no pending commit; for crash tests in child processes. */
  | { kind: 'exit'; code?: number }
  /** Never resolve: the caller is stuck at this boundary (its lease will expire). */
  | { kind: 'hang' }
  /** Run a callback (e.g. to interleave a competing transaction), then continue unless it throws. */
  | { kind: 'call'; fn: (context: FailpointContext, name: FailpointName) => void | Promise<void> };

export interface ArmOptions {
  /** Fire at most this many times, then become inert. Default: every time. */
  times?: number;
  /** Fire only when this returns true for the call's context; non-matching calls neither fire nor count. */
  match?: (context: FailpointContext) => boolean;
}

/** Thrown by a `throw` failpoint. Not a TaskLedgerError: it simulates a crash, not a typed refusal. */
export class FailpointError extends Error {
  readonly failpoint: FailpointName;
  readonly context: FailpointContext;
  constructor(name: FailpointName, context: FailpointContext) {
    super(`failpoint ${name} fired`);
    this.name = 'FailpointError';
    this.failpoint = name;
    this.context = context;
  }
}

/**
 * Default exit code of an `exit` failpoint. Why 86: distinct from Node's own
 * codes (1 uncaught error, 13 unsettled await, 129+ signals), so a crash test
 * can tell "the failpoint fired" from "the child failed for another reason".
 */
export const FAILPOINT_EXIT_CODE = 86;

/** Environment variable that arms failpoints in a child process at load. */
export const FAILPOINTS_ENV = 'TASKLEDGER_FAILPOINTS';

interface Armed {
  action: FailpointAction;
  remaining: number;
  match: ((context: FailpointContext) => boolean) | null;
}

const NAMES: ReadonlySet<string> = new Set(FAILPOINT_NAMES);
const armed = new Map<FailpointName, Armed>();
const hits = new Map<FailpointName, number>();
const RESOLVED: Promise<void> = Promise.resolve();
const EMPTY: FailpointContext = Object.freeze({});

function assertName(name: string): asserts name is FailpointName {
  if (!NAMES.has(name)) throw new Error(`unknown failpoint ${JSON.stringify(name)}`);
}

/**
 * A named boundary. Inert (an already-resolved promise) unless armed; when
 * armed and matching, performs the action and counts a hit.
 */
export function failpoint(name: FailpointName, context?: FailpointContext): Promise<void> {
  if (armed.size === 0) return RESOLVED;
  const entry = armed.get(name);
  if (entry === undefined) return RESOLVED;
  const ctx = context ?? EMPTY;
  if (entry.match !== null && !entry.match(ctx)) return RESOLVED;
  entry.remaining--;
  if (entry.remaining <= 0) armed.delete(name);
  hits.set(name, (hits.get(name) ?? 0) + 1);
  const action = entry.action;
  switch (action.kind) {
    case 'throw':
      return Promise.reject(new FailpointError(name, ctx));
    case 'exit':
      process.stderr.write(`taskledger failpoint ${name}: exit ${action.code ?? FAILPOINT_EXIT_CODE}\n`);
      return process.exit(action.code ?? FAILPOINT_EXIT_CODE);
    case 'hang':
      return new Promise<void>(() => {});
    case 'call':
      try {
        return Promise.resolve(action.fn(ctx, name));
      } catch (err) {
        return Promise.reject(err instanceof Error ? err : new Error(String(err)));
      }
  }
}

/** Arms (or re-arms, replacing the previous action) a failpoint and resets its hit count. */
export function armFailpoint(name: FailpointName, action: FailpointAction, options: ArmOptions = {}): void {
  assertName(name);
  const times = options.times ?? Number.POSITIVE_INFINITY;
  if (!(times >= 1) || (Number.isFinite(times) && !Number.isInteger(times))) {
    throw new Error(`failpoint ${name}: times must be a positive integer`);
  }
  if (action.kind === 'exit' && action.code !== undefined && !(Number.isInteger(action.code) && action.code >= 0)) {
    throw new Error(`failpoint ${name}: exit code must be a non-negative integer`);
  }
  armed.set(name, { action, remaining: times, match: options.match ?? null });
  hits.set(name, 0);
}

export function disarmFailpoint(name: FailpointName): void {
  assertName(name);
  armed.delete(name);
}

/** Disarms every failpoint; hit counts stay readable until the next arm. */
export function disarmAll(): void {
  armed.clear();
}

/** How many times the failpoint fired since it was last armed. */
export function failpointHits(name: FailpointName): number {
  assertName(name);
  return hits.get(name) ?? 0;
}

export function isFailpointArmed(name: FailpointName): boolean {
  return armed.has(name);
}

// ------------------------------------------------------ environment arming ---

export interface FailpointSpec {
  name: FailpointName;
  action: Exclude<FailpointAction, { kind: 'call' }>;
  times?: number;
  /** Context equality matches: fire only when the context has each key and `String(context[key]) === value`. */
  match: Record<string, string>;
}

function positiveInt(entry: string, key: string, value: string, min: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value))) {
    throw new Error(`${FAILPOINTS_ENV}: ${key} in ${JSON.stringify(entry)} must be an integer >= ${min}`);
  }
  return Number(value);
}

/** Parses a `TASKLEDGER_FAILPOINTS` value; throws on anything malformed. */
export function parseFailpointSpec(text: string): FailpointSpec[] {
  const specs: FailpointSpec[] = [];
  const names = new Set<string>();
  for (const raw of text.split(',')) {
    const entry = raw.trim();
    if (entry === '') continue;
    const [head = '', ...params] = entry.split(':').map((p) => p.trim());
    const eq = head.indexOf('=');
    if (eq < 0) throw new Error(`${FAILPOINTS_ENV}: ${JSON.stringify(entry)} is not name=action`);
    const name = head.slice(0, eq).trim();
    const actionName = head.slice(eq + 1).trim();
    if (!NAMES.has(name)) throw new Error(`${FAILPOINTS_ENV}: unknown failpoint ${JSON.stringify(name)}`);
    if (names.has(name)) throw new Error(`${FAILPOINTS_ENV}: failpoint ${name} is armed twice`);
    names.add(name);
    if (actionName !== 'throw' && actionName !== 'exit' && actionName !== 'hang') {
      throw new Error(`${FAILPOINTS_ENV}: action ${JSON.stringify(actionName)} of ${name} is not throw, exit or hang`);
    }
    let times: number | undefined;
    let code: number | undefined;
    const match: Record<string, string> = {};
    for (const param of params) {
      const peq = param.indexOf('=');
      const key = peq < 0 ? '' : param.slice(0, peq).trim();
      const value = peq < 0 ? '' : param.slice(peq + 1).trim();
      if (key === '' || value === '') {
        throw new Error(`${FAILPOINTS_ENV}: parameter ${JSON.stringify(param)} of ${name} is not key=value`);
      }
      if (key === 'times') times = positiveInt(entry, key, value, 1);
      else if (key === 'code') {
        if (actionName !== 'exit') throw new Error(`${FAILPOINTS_ENV}: code= applies only to exit (${name})`);
        code = positiveInt(entry, key, value, 0);
      } else if (Object.hasOwn(match, key)) {
        throw new Error(`${FAILPOINTS_ENV}: match key ${key} of ${name} is given twice`);
      } else match[key] = value;
    }
    const action: FailpointSpec['action'] =
      actionName === 'exit' ? (code === undefined ? { kind: 'exit' } : { kind: 'exit', code }) : { kind: actionName };
    specs.push({ name: name as FailpointName, action, ...(times === undefined ? {} : { times }), match });
  }
  return specs;
}

/** Arms every entry of a `TASKLEDGER_FAILPOINTS` value. */
export function armFailpointsFromSpec(text: string): FailpointSpec[] {
  const specs = parseFailpointSpec(text);
  for (const spec of specs) {
    const keys = Object.entries(spec.match);
    armFailpoint(spec.name, spec.action, {
      ...(spec.times === undefined ? {} : { times: spec.times }),
      ...(keys.length === 0
        ? {}
        : { match: (ctx) => keys.every(([k, v]) => ctx[k] !== undefined && String(ctx[k]) === v) }),
    });
  }
  return specs;
}

const fromEnv = process.env[FAILPOINTS_ENV];
if (fromEnv !== undefined && fromEnv.trim() !== '') armFailpointsFromSpec(fromEnv);
