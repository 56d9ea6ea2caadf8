/**
 * The reaper's sweep, one pass (`sweepOnce`, also what tests call instead of
 * sleeping):
 * 1. expired leases become `unknown` (never `failed`);
 * 2. every operation that may need recovery (`findRecoveryCandidates`: an
 *    unfinished external-ID release, an unknown step or compensation, a
 *    pending compensation, a permanently failed step, or a creation stalled
 *    for `quietMs`) gets
 *    `recoverUntilSettled`: the one legal RecoveryAction under a recovery
 *    claim, again while an action makes progress (reconcile, compensate,
 *    resume, Complete, Abort; see `recover.ts`);
 * 3. launch dispatch claims (`recoverLaunchDispatches`, when the reaper has
 *    the launch workers' executor): expired claims become `unknown` and are
 *    reconciled from runtime proof or retried from no-dispatch proof;
 * 4. every workspace deletion still `running` gets a cascade pass, and every
 *    delivered deferred start that was never promoted is promoted again;
 * 5. every non-terminal operation gets its due wake-ups again, so flushing
 *    Redis loses nothing;
 * 6. staged uploads no creation claimed within `stagedTtlMs` expire (rows,
 *    then files; at most once a minute per reaper), and files under staging/
 *    older than the TTL whose row is gone are removed (at most once an hour
 *    per reaper; src/runtime/staged-expiry.ts).
 * A bounded batch per pass; the next sweep continues.
 */
import { isTransientError } from '../domain/errors';
import { RECOVERY_ACTIONS, type RecoveryAction } from '../domain/vocab';
import { expireTaskCreationLeases, findExpiredLeaseOperations } from '../store/lease-expiry';
import type { Executor } from '../launch/executor';
import { DEFAULT_LEASE_MS } from '../store/step-claims';
import { recoverLaunchDispatches, type DispatchRecoveryReport } from './dispatch-recovery';
import { recoverUntilSettled, type RecoverDeps, type RecoveryOutcome } from './recover';
import { retryUnpromotedStarts } from './deferred-retry';
import { countByAction, findStuckOperations } from './stuck';

/** Why 10 minutes: as TASKLEDGER_STUCK_AFTER_MS's default (src/app/config.ts). */
const DEFAULT_STUCK_AFTER_MS = 600_000;
import { findRecoveryCandidates, sweepWakeups } from './sweep';
import { runWorkspaceDeletion } from '../lifecycle/workspace-deletion-runner';
import { findRunningWorkspaceDeletions } from '../store/workspace-deletion';
import { DEFAULT_STAGED_TTL_MS, runStagedPasses, type StagedPassClock } from './staged-expiry';
import { afterScan, nextLaunchScan, type LaunchScanState } from './launch-window';

export interface ReaperDeps extends RecoverDeps {
  /** Limit the sweep to one workspace (a per-tenant reaper; tests sharing a database). Default: all. */
  workspaceId?: string;
  /**
   * How long an operation must be untouched before the reaper resumes or
   * completes it (a creation with an unknown/failed step or pending
   * compensation is recovered at once). Default: the lease, so a worker that
   * is still alive (it renews every lease/3) is never raced.
   */
  quietMs?: number;
  /**
   * The launch workers' executor (same host and runtime directory): with it
   * the sweep also recovers launch dispatch claims; without it, it leaves them.
   */
  executor?: Executor;
  /** A creation that has not moved for this long counts as stuck (`taskledger_stuck_operations`). Default 10 min. */
  stuckAfterMs?: number;
  /** How long a staged upload may wait for a claim before it expires (TASKLEDGER_STAGED_TTL_MS). Default 7 days. */
  stagedTtlMs?: number;
  /** This reaper's monotonic clock in ms, which schedules its stranded-launch scans. Default `performance.now`. */
  monotonicNow?: () => number;
}

export interface SweepReport {
  expiredSteps: number;
  expiredCompensations: number;
  reconciled: { succeeded: number; retry: number; stillUnknown: number };
  /** Recovery actions run under a claim, per action. */
  recovered: Record<RecoveryAction, number>;
  /** Operations examined for recovery. */
  recoveryCandidates: number;
  /** No action: another recovery claim was live (another reaper). */
  recoveryFenced: number;
  /** No action: an invariant violation or a refused action (logged; left for an operator). */
  recoveryConflicts: number;
  /**
   * Operations whose recovery threw an unexpected error (logged; retried after the back-off) or met a database
   * fault (a lost connection, deadlock retries used up: retried by the next sweep, no back-off).
   */
  recoveryErrors: number;
  /** Operations this reaper left out because recovery could not move them recently (STUCK_BACKOFF_MS). */
  recoveryBackedOff: number;
  /** Launch dispatch recovery; null when the reaper has no executor. */
  dispatch: DispatchRecoveryReport | null;
  /** Delivered deferred starts that were never promoted: promoted now, or refused again (runtime/deferred-retry.ts). */
  deferred: { promoted: number; refused: number };
  /** Operations that have not moved for `stuckAfterMs` (counted when the reaper has metrics). */
  stuck: number;
  /** Workspace deletion cascades run by this sweep, and how many of them finished. */
  deletions: { running: number; finished: number };
  /** Staged uploads expired (rows deleted, files unlinked), kept (still planned by a creation), orphan files removed. */
  staged: { expired: number; kept: number; orphans: number };
  wakeups: number;
}

/** Why 200: a sweep's work stays bounded; the next sweep continues. */
const BATCH = 200;

/** Per reaper (by its deps): its stranded-launch scans so far (src/runtime/launch-window.ts). */
const launchScans = new WeakMap<ReaperDeps, LaunchScanState>();

export function emptySweepReport(): SweepReport {
  return {
    expiredSteps: 0,
    expiredCompensations: 0,
    reconciled: { succeeded: 0, retry: 0, stillUnknown: 0 },
    recovered: Object.fromEntries(RECOVERY_ACTIONS.map((a) => [a, 0])) as Record<RecoveryAction, number>,
    recoveryCandidates: 0,
    recoveryFenced: 0,
    recoveryConflicts: 0,
    recoveryErrors: 0,
    recoveryBackedOff: 0,
    dispatch: null,
    deferred: { promoted: 0, refused: 0 },
    stuck: 0,
    deletions: { running: 0, finished: 0 },
    staged: { expired: 0, kept: 0, orphans: 0 },
    wakeups: 0,
  };
}

/**
 * Why here: a deletion's cascade job lives in Redis; the sweep runs every
 * deletion still `running` from the ledger, so losing Redis (or a crash in a
 * pass) only delays it. Its events and jobs are woken below (outbox wake-ups)
 * and by the cleanup role's periodic pass.
 */
async function runPendingDeletions(deps: ReaperDeps): Promise<{ running: number; finished: number }> {
  const out = { running: 0, finished: 0 };
  for (const d of await findRunningWorkspaceDeletions(deps.effects.db, deps.workspaceId)) {
    out.running++;
    try {
      const pass = await runWorkspaceDeletion(
        {
          db: deps.effects.db,
          dataDir: deps.effects.dataDir,
          log: deps.log,
          announceEnded: deps.queues ? (id) => deps.queues!.creationEvents.announce(id) : undefined,
        },
        d.id,
        d.workspace_id,
      );
      if (pass.finished) out.finished++;
    } catch (err) {
      deps.log.error({ err, deletion_id: d.id }, 'a workspace deletion pass failed; the next sweep runs it again');
    }
  }
  return out;
}

/**
 * Why 5 minutes: an operation recovery cannot move (an invariant violation,
 * an unexpected error, an unknown step whose observation stays mixed or
 * foreign) waits for an operator; looking at it again every sweep would
 * repeat its observation I/O and, with enough of them, fill every batch so
 * that no other operation is recovered. Each reaper backs off from such an
 * operation for this long, then looks again. Normal wake-ups are unaffected.
 */
const STUCK_BACKOFF_MS = 5 * 60_000;
/** Why 1000: bounds the exclusion list a sweep sends; beyond it, the oldest back-offs end early. */
const MAX_BACKOFFS = 1000;
/** Per reaper (by its deps): operation id -> time (ms) until which it is left out. */
const backoffs = new WeakMap<ReaperDeps, Map<string, number>>();
/** Per reaper: deferred starts whose promotion was refused, left alone for a while. */
const deferredBackoffs = new WeakMap<ReaperDeps, Map<string, number>>();

function deferredBackoffOf(deps: ReaperDeps): Map<string, number> {
  let m = deferredBackoffs.get(deps);
  if (!m) deferredBackoffs.set(deps, (m = new Map<string, number>()));
  return m;
}

function backoffOf(deps: ReaperDeps): Map<string, number> {
  let m = backoffs.get(deps);
  if (!m) {
    m = new Map();
    backoffs.set(deps, m);
  }
  const now = Date.now();
  for (const [id, until] of m) if (until <= now) m.delete(id);
  while (m.size > MAX_BACKOFFS) m.delete(m.keys().next().value as string);
  return m;
}

/**
 * Recovery could not move the operation: an invariant conflict, an error, an
 * action the Store refused, or unknown steps it could not resolve. A live
 * claim (`claim_in_flight`) or another reaper's claim (`stale_claim`) is not
 * stuck: the next sweep looks again.
 */
function stuck(outcomes: RecoveryOutcome[]): boolean {
  if (outcomes.some((o) => o.progressed || o.transient)) return false;
  return outcomes.some(
    (o) =>
      o.skipped === 'creation_state_conflict' ||
      o.skipped === 'error' ||
      (o.action !== null && o.detail !== null) ||
      o.reconciled.stillUnknown > 0,
  );
}

async function recoverCandidates(deps: ReaperDeps, report: SweepReport): Promise<void> {
  const backoff = backoffOf(deps);
  const candidates = await findRecoveryCandidates(deps.effects.db, {
    limit: BATCH,
    quietMs: deps.quietMs ?? deps.leaseMs ?? DEFAULT_LEASE_MS,
    workspaceId: deps.workspaceId,
    exclude: [...backoff.keys()],
  });
  report.recoveryBackedOff = backoff.size;
  report.recoveryCandidates = candidates.length;
  for (const operationId of candidates) {
    let outcomes;
    try {
      outcomes = await recoverUntilSettled(deps, operationId);
    } catch (err) {
      // One operation's unexpected failure (a database error, a broken invariant) must not stop the sweep:
      // the rest of the batch, dispatch recovery and the wake-ups still run. A database fault (a lost connection)
      // is tried again by the next sweep; anything else after a back-off.
      report.recoveryErrors++;
      if (isTransientError(err)) {
        deps.log.warn({ err, operation_id: operationId }, 'recovery of one operation met a database fault; next sweep');
        continue;
      }
      deps.log.error({ err, operation_id: operationId }, 'recovery of one operation failed; the sweep goes on');
      backoff.set(operationId, Date.now() + STUCK_BACKOFF_MS);
      continue;
    }
    if (stuck(outcomes)) backoff.set(operationId, Date.now() + STUCK_BACKOFF_MS);
    else backoff.delete(operationId);
    for (const out of outcomes) {
      if (out.action !== null) report.recovered[out.action]++;
      if (out.skipped === 'stale_claim') report.recoveryFenced++;
      if (out.transient) report.recoveryErrors++;
      else if (out.skipped === 'creation_state_conflict' || out.skipped === 'error' || (out.action && out.detail)) {
        report.recoveryConflicts++;
      }
      report.reconciled.succeeded += out.reconciled.succeeded;
      report.reconciled.retry += out.reconciled.retry;
      report.reconciled.stillUnknown += out.reconciled.stillUnknown;
    }
  }
}

/** Per reaper: when it last ran each staged-upload pass. */
const stagedRuns = new WeakMap<ReaperDeps, StagedPassClock>();

async function expireStaged(deps: ReaperDeps, report: SweepReport): Promise<void> {
  const clock = stagedRuns.get(deps) ?? { expiry: 0, orphans: 0 };
  stagedRuns.set(deps, clock);
  try {
    const staged = { db: deps.effects.db, dataDir: deps.effects.dataDir, log: deps.log };
    const ttlMs = deps.stagedTtlMs ?? DEFAULT_STAGED_TTL_MS;
    report.staged = await runStagedPasses(staged, { ttlMs, workspaceId: deps.workspaceId }, clock);
  } catch (err) {
    deps.log.error({ err }, 'staged upload expiry failed; a later sweep runs it again');
  }
}

export async function sweepOnce(deps: ReaperDeps): Promise<SweepReport> {
  const report = emptySweepReport();
  for (const opId of await findExpiredLeaseOperations(deps.effects.db, BATCH, deps.workspaceId)) {
    const r = await expireTaskCreationLeases(deps.effects.db, opId, deps.actor);
    report.expiredSteps += r.steps;
    report.expiredCompensations += r.compensations;
  }
  await recoverCandidates(deps, report);
  if (deps.executor) {
    report.dispatch = await recoverLaunchDispatches({
      db: deps.effects.db,
      queues: deps.queues,
      log: deps.log,
      actor: deps.actor,
      executor: deps.executor,
      workspaceId: deps.workspaceId,
    });
  }
  report.deletions = await runPendingDeletions(deps);
  // The first sweep of a reaper looks for stranded launches in the whole ledger, later ones in a recent window:
  // 15 minutes once a minute, the time since the previous scan otherwise (launch-window.ts).
  const scanStartedAt = (deps.monotonicNow ?? (() => performance.now()))();
  const scan = nextLaunchScan(launchScans.get(deps), scanStartedAt);
  report.deferred = await retryUnpromotedStarts(
    {
      db: deps.effects.db,
      queues: deps.queues,
      log: deps.log,
      actor: deps.actor,
      workspaceId: deps.workspaceId,
      backoff: deferredBackoffOf(deps),
    },
    scan.windowMs,
  );
  if (deps.queues) {
    const w = await sweepWakeups(deps.effects.db, deps.queues, {
      workspaceId: deps.workspaceId,
      launchWindowMs: scan.windowMs,
    });
    launchScans.set(deps, afterScan(launchScans.get(deps), scan, scanStartedAt));
    report.wakeups = w.operations + w.outboxWorkspaces + w.launches;
  }
  if (deps.metrics) {
    // What has not moved, by the action it waits for: what an operator is paged on (runtime/stuck.ts).
    const stuck = await findStuckOperations(deps.effects.db, {
      stuckAfterMs: deps.stuckAfterMs ?? DEFAULT_STUCK_AFTER_MS,
      workspaceId: deps.workspaceId,
      limit: 1000,
    });
    deps.metrics.stuckOperations.reset();
    for (const [action, n] of countByAction(stuck)) deps.metrics.stuckOperations.set({ action }, n);
    report.stuck = stuck.length;
  }
  await expireStaged(deps, report);
  return report;
}
