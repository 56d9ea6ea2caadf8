/**
 * Processes a launch wake-up (sent by the outbox dispatcher after
 * `task.created` is committed, or by dispatch recovery after a proven
 * no-dispatch retry): take the dispatch claim, re-check it right before any
 * I/O, start the agent through the executor outside any transaction, record
 * the runtime handle. A refused claim (not completed, already launched, a
 * wake-up for another generation) or a claim that went stale before the
 * start (lease expired, recovered, retried) is a logged no-op; a task whose
 * workflow step has no free WIP slot is queued by the claim (`queued`) and
 * launched when a freed slot admits it.
 */
import { failpoint } from '../failpoints';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { LaunchJob } from '../../queues/names';
import { parseCanonical } from '../canonical/canonical-json';
import type { Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import { claimLaunchDispatch, failLaunchDispatch, type DispatchClaim } from '../store/launch-dispatch';
import { confirmLaunchDispatchClaim } from '../store/launch-confirm';
import type { OutboxMark } from '../store/outbox-mark';
import { recordLaunchDispatch } from '../store/launch-record';
import { abandonLaunchDispatch } from '../store/launch-dispatch-end';
import { launchConfigSha256 } from '../plan/launch-config';
import { isTaskLedgerError } from '../domain/errors';
import { ExecutorError, type Executor } from './executor';

export interface LaunchWorkerDeps {
  db: Db;
  executor: Executor;
  dataDir: string;
  log: Logger;
  metrics: Metrics | null;
  workerId: string;
  leaseMs: number;
  /** Wakes the launches of tasks a freed WIP slot admitted; without it the reaper's sweep finds them. */
  wakeLaunches?: (taskIds: string[]) => Promise<void>;
}

/**
 * What to start: the agent profile's command as it is now, and whether it is still the configuration the
 * creation bound (`launch_config_sha256`, plan/launch-config.ts) — a profile changed since Begin must not run.
 */
function launchSpec(claim: DispatchClaim, dataDir: string) {
  const { taskId } = claim;
  const row = claim.spec;
  const executor = parseCanonical(row.executor_json ?? '{}', { requireCanonical: false }) as {
    command?: string[];
  };
  const bound =
    row.executor_json != null &&
    row.environment_id != null &&
    launchConfigSha256({
      agent_profile_id: claim.request.agent_profile_id,
      executor: executor,
      session_id: claim.sessionId,
      task_id: taskId,
      task_environment_id: row.environment_id,
    }) === claim.request.launch_config_sha256;
  let cwd = row.worktree_path ?? null;
  if (!cwd) {
    cwd = join(dataDir, 'tasks', taskId);
    mkdirSync(cwd, { recursive: true });
  }
  return { command: executor.command ?? [], cwd, bound };
}

/**
 * A launch wake-up. `generation` is the dispatch claim generation it was sent
 * for (recovery's retries carry it; the outbox's first wake-up does not and
 * accepts whatever claimable state the ledger holds).
 */
export type LaunchWakeup = LaunchJob & { generation?: number };

/** Job ID of a recovery retry: one wake-up per claim generation (BullMQ IDs may not contain ':'). */
export const launchRetryJobId = (operationId: string, sessionId: string, generation: number): string =>
  `launch-${operationId}-${sessionId}-g${generation}`;

/**
 * `mark`: the outbox event whose delivery runs this launch in place, marked with the launch record. `taken`: the
 * claim this worker's own phase B took for it (ADR 0019); the launch then takes none of its own.
 */
export async function processLaunchJob(
  deps: LaunchWorkerDeps,
  job: LaunchWakeup,
  mark?: OutboxMark,
  taken?: DispatchClaim,
): Promise<'launched' | 'queued' | 'skipped' | 'failed'> {
  const log = deps.log.child({ operation_id: job.operationId, session_id: job.sessionId });
  const claim =
    taken ??
    (await claimLaunchDispatch(
      deps.db,
      { operationId: job.operationId, sessionId: job.sessionId },
      deps.workerId,
      deps.leaseMs,
      job.generation,
    ));
  if ('refused' in claim) {
    log.info({ reason: claim.refused }, 'launch job not applicable: nothing to do');
    deps.metrics?.jobsSkipped.inc({ queue: 'launch', reason: 'refused' });
    return 'skipped';
  }
  if ('queued' in claim) {
    // The step's WIP slots are taken: the task waits in its queue; the move or deletion that frees a slot admits it.
    log.info({ workflow_step_id: claim.queued }, 'no free WIP slot: the task waits in its step queue');
    deps.metrics?.jobsSkipped.inc({ queue: 'launch', reason: 'queued' });
    return 'queued';
  }
  await failpoint('after_dispatch_claim_before_runtime_start', {
    operationId: claim.operationId,
    sessionId: claim.sessionId,
  });
  const spec = launchSpec(claim, deps.dataDir);
  if (!spec.bound) {
    // The agent profile changed (or is gone) since Begin: its command is not the launch this creation proved.
    const ended = await abandonLaunchDispatch(deps.db, claim, {
      code: 'launch_config_changed',
      message: 'the agent profile no longer matches the launch configuration bound at Begin; nothing was started',
    }).catch((err: unknown) => {
      if (!isTaskLedgerError(err, 'stale_claim')) throw err;
      return { admitted: [] };
    });
    await deps.wakeLaunches?.(ended.admitted).catch((err: unknown) => {
      log.warn({ err }, 'could not wake the launches the freed slot admitted; the sweep will');
    });
    deps.metrics?.launches.inc({ state: 'cancelled' });
    log.warn(
      { generation: claim.generation },
      'the agent profile changed since Begin: launch cancelled, nothing started',
    );
    return 'failed';
  }
  // A worker paused past its lease may have been recovered and retried: only a live claim may start anything.
  if (!(await confirmLaunchDispatchClaim(deps.db, claim, deps.leaseMs))) {
    log.info({ generation: claim.generation }, 'dispatch claim went stale before the start: nothing started');
    deps.metrics?.jobsSkipped.inc({ queue: 'launch', reason: 'stale' });
    return 'skipped';
  }
  try {
    const runtime = await deps.executor.start({
      idempotencyKey: claim.idempotencyKey,
      generation: claim.generation,
      sessionId: claim.sessionId,
      taskId: claim.taskId,
      operationId: claim.operationId,
      command: spec.command,
      cwd: spec.cwd,
      env: {
        TASKLEDGER_TASK_ID: claim.taskId,
        TASKLEDGER_SESSION_ID: claim.sessionId,
        TASKLEDGER_OPERATION_ID: claim.operationId,
      },
    });
    try {
      await recordLaunchDispatch(deps.db, claim, runtime, mark);
    } catch (err) {
      // The task (or its workspace) was deleted while the agent started: the deletion fenced this claim and handed
      // the agent to a cleanup job, which stops it once this claim's lease has run out. Nothing to record here.
      if (!isTaskLedgerError(err) || !['creation_state_conflict', 'stale_claim'].includes(err.code)) throw err;
      log.warn({ err: err.message }, 'the launch was fenced while the agent started; its cleanup job stops it');
      deps.metrics?.jobsSkipped.inc({ queue: 'launch', reason: 'fenced' });
      return 'skipped';
    }
    deps.metrics?.launches.inc({ state: 'succeeded' });
    log.info({ pid: runtime.pid, started: runtime.started }, 'agent launched');
    return 'launched';
  } catch (err) {
    if (!(err instanceof ExecutorError)) throw err;
    const cls = err.failureClass;
    if (cls === 'stale') {
      log.info({ err: err.message, generation: claim.generation }, 'a later claim generation owns the dispatch');
      deps.metrics?.jobsSkipped.inc({ queue: 'launch', reason: 'stale' });
      return 'skipped';
    }
    let state: 'retry_wait' | 'unknown';
    try {
      state = await failLaunchDispatch(deps.db, claim, {
        class: cls,
        code: cls === 'no_dispatch' ? 'spawn_refused' : 'start_ambiguous',
        message: err.message,
      });
    } catch (failErr) {
      if (!isTaskLedgerError(failErr, 'stale_claim')) throw failErr;
      log.warn({ err: err.message }, 'the launch failed and its claim was fenced meanwhile: nothing recorded');
      return 'skipped';
    }
    deps.metrics?.launches.inc({ state });
    log.warn({ err: err.message, state }, 'agent launch failed');
    return 'failed';
  }
}
