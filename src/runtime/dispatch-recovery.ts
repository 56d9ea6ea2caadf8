/**
 * Launch-dispatch recovery, one pass (the reaper's sweep calls it; tests call
 * it instead of sleeping):
 *
 *  1. a `running` dispatch claim whose lease expired becomes `unknown`;
 *  2. each `unknown` claim of a completed operation with no deletion fence is
 *     observed through the executor (I/O, outside any transaction), and
 *     `chooseRecoveryAction` picks the action from that proof:
 *     runtime proof -> `reconcile_launch_dispatch` (record the runtime, claim
 *     `succeeded`, never a second start); authenticated no-dispatch proof ->
 *     `retry_launch_dispatch` (claim `retry_wait` at generation + 1, then a
 *     launch wake-up for that generation); no proof either way -> the claim
 *     stays `unknown` with a log line (the next pass observes again);
 *  3. every `retry_wait` claim gets its launch wake-up again (job IDs carry
 *     the generation, so repeats collapse and a stale job does nothing),
 *     so losing Redis never strands a launch; one that used up its attempts
 *     ends `cancelled` (`retries_exhausted`), visibly, instead.
 *
 * Each action runs through a Store method that re-chooses under lock and
 * compares the observed generation, so a racing worker or sweep makes it a
 * logged no-op.
 */
import { LAUNCH_QUEUE } from '../../queues/names';
import type { QueueSet } from '../coordinator/queues';
import type { Db } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import type { Executor } from '../launch/executor';
import { launchRetryJobId, type LaunchWakeup } from '../launch/launch-worker';
import type { Logger } from '../log';
import {
  expireLaunchDispatchLeases,
  findExpiredDispatchOperations,
  findExhaustedDispatches,
  findRetryableDispatches,
  findUnknownDispatches,
  readDispatchSnapshot,
  reconcileLaunchDispatch,
  retryLaunchDispatch,
  type DispatchTarget,
} from '../store/launch-dispatch-recovery';
import { cancelExhaustedDispatch } from '../store/launch-dispatch-end';
import { wakeLaunches } from '../coordinator/wake-launches';
import { chooseRecoveryAction } from './recovery-action';

export interface DispatchRecoveryDeps {
  db: Db;
  /** Where retried launches are woken; null: the ledger is updated and the next pass with queues wakes them. */
  queues: QueueSet | null;
  log: Logger;
  actor: string;
  executor: Executor;
  /** Limit the pass to one workspace (a per-tenant reaper; tests sharing a database). Default: all. */
  workspaceId?: string;
}

export interface DispatchRecoveryReport {
  /** `unknown -> succeeded` from runtime proof. */
  reconciled: number;
  /** `unknown -> retry_wait` (generation + 1) from no-dispatch proof. */
  retried: number;
  /** Still `unknown`: no proof either way, or the Store refused (raced). */
  left: number;
  /** `running` claims whose lease expired, now `unknown`. */
  expired: number;
  /** Launch wake-ups sent for `retry_wait` claims (including this pass's retries). */
  woken: number;
  /** `retry_wait` claims that used up their attempts, now `cancelled` (`retries_exhausted`). */
  exhausted: number;
}

/** Why 200: a pass's work stays bounded; the next pass continues. */
const BATCH = 200;
/**
 * Why 5: a `retry_wait` claim is re-woken by every pass only while it has
 * been claimed fewer than this many times; a launch the OS keeps refusing
 * stops after that and waits for an operator instead of spawning forever.
 */
export const MAX_LAUNCH_ATTEMPTS = 5;

/** One pass's state: which claims already got their wake-up (a retry is woken once, not again in step 3). */
type PassDeps = DispatchRecoveryDeps & { woken?: Set<string> };

async function wake(deps: PassDeps, target: DispatchTarget, generation: number): Promise<boolean> {
  if (!deps.queues || deps.woken?.has(target.dispatchId)) return false;
  deps.woken?.add(target.dispatchId);
  const job: LaunchWakeup = {
    operationId: target.operationId,
    taskId: target.taskId,
    sessionId: target.sessionId,
    generation,
  };
  const jobId = launchRetryJobId(target.operationId, target.sessionId, generation);
  try {
    const queue = deps.queues.get(LAUNCH_QUEUE);
    // A failed job keeps its ID (removeOnFail) and would swallow this wake-up; the ledger says it is due again.
    const previous = await queue.getJob(jobId);
    if (previous && (await previous.isFailed())) await previous.remove();
    await queue.add('launch', job, { jobId });
    return true;
  } catch (err) {
    deps.log.warn({ err, dispatch_id: target.dispatchId }, 'launch wake-up not sent; the next pass sends it again');
    return false;
  }
}

async function recoverOne(deps: PassDeps, target: DispatchTarget, report: DispatchRecoveryReport) {
  const log = deps.log.child({
    operation_id: target.operationId,
    session_id: target.sessionId,
    dispatch_id: target.dispatchId,
    generation: target.generation,
  });
  let observation;
  try {
    observation = await deps.executor.observe(target);
  } catch (err) {
    log.warn({ err }, 'could not observe an unknown dispatch; it stays unknown');
    report.left++;
    return;
  }
  const snapshot = await readDispatchSnapshot(deps.db, target, observation.proof);
  const decision = snapshot === null ? null : chooseRecoveryAction(snapshot);
  try {
    if (decision?.action === 'reconcile_launch_dispatch' && observation.proof === 'runtime') {
      await reconcileLaunchDispatch(deps.db, target, observation.runtime, deps.actor);
      report.reconciled++;
      log.info(
        { pid: observation.runtime.pid, alive: observation.runtime.alive },
        'unknown dispatch reconciled from runtime proof',
      );
      return;
    }
    if (decision?.action === 'retry_launch_dispatch' && observation.proof === 'no_dispatch') {
      const { generation } = await retryLaunchDispatch(deps.db, target, observation.evidence, deps.actor);
      report.retried++;
      if (await wake(deps, target, generation)) report.woken++;
      log.info(
        { marker: observation.evidence.marker, next_generation: generation },
        'unknown dispatch retried from no-dispatch proof',
      );
      return;
    }
  } catch (err) {
    if (isTaskLedgerError(err)) {
      log.warn({ code: err.code, detail: err.message }, 'unknown dispatch not recovered; it stays unknown');
      report.left++;
      return;
    }
    throw err;
  }
  report.left++;
  // Another pass (the other process's reaper) settled the claim between this pass's find and its snapshot.
  if (snapshot !== null && snapshot.dispatch?.state !== 'unknown') {
    log.info({ state: snapshot.dispatch?.state ?? null }, 'unknown dispatch already settled by another pass');
    return;
  }
  log.warn(
    {
      reason: observation.proof === null ? observation.reason : `proof ${observation.proof}`,
      chosen: decision?.action ?? null,
    },
    'unknown dispatch: no proof either way; it stays unknown for the next pass or an operator',
  );
}

export async function recoverLaunchDispatches(deps: DispatchRecoveryDeps): Promise<DispatchRecoveryReport> {
  const report: DispatchRecoveryReport = { reconciled: 0, retried: 0, left: 0, expired: 0, woken: 0, exhausted: 0 };
  const pass: PassDeps = { ...deps, woken: new Set() };
  for (const opId of await findExpiredDispatchOperations(deps.db, BATCH, deps.workspaceId)) {
    report.expired += await expireLaunchDispatchLeases(deps.db, opId, deps.actor);
  }
  for (const target of await findUnknownDispatches(deps.db, BATCH, deps.workspaceId)) {
    await recoverOne(pass, target, report);
  }
  if (deps.queues) {
    const retryable = await findRetryableDispatches(deps.db, MAX_LAUNCH_ATTEMPTS, BATCH, deps.workspaceId);
    for (const target of retryable) {
      if (await wake(pass, target, target.generation)) report.woken++;
    }
  }
  // A launch the OS refused MAX_LAUNCH_ATTEMPTS times ends visibly instead of waiting in retry_wait for nobody.
  for (const target of await findExhaustedDispatches(deps.db, MAX_LAUNCH_ATTEMPTS, BATCH, deps.workspaceId)) {
    try {
      const ended = await cancelExhaustedDispatch(deps.db, target, MAX_LAUNCH_ATTEMPTS, deps.actor);
      report.exhausted++;
      if (deps.queues && ended.admitted.length > 0) {
        await wakeLaunches({ db: deps.db, queues: deps.queues, log: deps.log }, ended.admitted);
      }
      deps.log.warn(
        { dispatch_id: target.dispatchId, operation_id: target.operationId },
        'launch cancelled: retries exhausted',
      );
    } catch (err) {
      if (!isTaskLedgerError(err)) throw err;
    }
  }
  return report;
}
