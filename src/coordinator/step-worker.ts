/**
 * Processes one step wake-up: claim (lease + generation) and commit, perform
 * the effect outside any transaction while a heartbeat renews the lease,
 * record by compare-and-set (inside the handler), then send the wake-ups the
 * operation needs next. A duplicate or stale job finds the step already
 * claimed or finished, does nothing, and says so in the log. A permanent
 * `failed` starts recovery of the operation at once (compensate, then Abort)
 * instead of waiting for the next sweep; if another step is still running,
 * the claim finds `claim_in_flight` and the reaper finishes it later.
 */
import { failpoint } from '../failpoints';
import { isTaskLedgerError } from '../domain/errors';
import type { StepState } from '../domain/vocab';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { StepHandlers } from '../steps/index';
import type { EffectDeps, StepHandler } from '../steps/types';
import { recoverUntilSettled } from '../runtime/recover';
import { claimTaskCreationStep, renewTaskCreationStepLease } from '../store/step-claims';
import type { StepClaim } from '../store/types';
import type { StepJob } from '../../queues/names';
import { enqueueRunnable } from './enqueue';
import type { QueueSet } from './queues';

export type { StepHandlers };

export interface StepWorkerDeps {
  effects: EffectDeps;
  handlers: StepHandlers;
  queues: QueueSet;
  log: Logger;
  metrics: Metrics | null;
  workerId: string;
  leaseMs: number;
}

/** Why lease/3: two heartbeats can be lost before the lease expires. */
function heartbeatEvery(leaseMs: number): number {
  return Math.max(250, Math.floor(leaseMs / 3));
}

export async function processStepJob(
  deps: StepWorkerDeps,
  job: StepJob,
  jobId: string,
): Promise<StepState | 'skipped'> {
  const log = deps.log.child({ operation_id: job.operationId, step_id: job.stepId, kind: job.kind, job_id: jobId });
  let claim: StepClaim;
  try {
    claim = await claimTaskCreationStep(
      deps.effects.db,
      { kind: 'operation', operationId: job.operationId, actor: deps.workerId },
      { kind: job.kind, stepKey: job.stepKey },
      `${deps.workerId}/${jobId}`,
      deps.leaseMs,
    );
  } catch (err) {
    if (isTaskLedgerError(err) && ['creation_state_conflict', 'stale_claim', 'not_found'].includes(err.code)) {
      log.info({ reason: err.code, detail: err.message }, 'duplicate or stale step job: nothing to do');
      deps.metrics?.jobsSkipped.inc({ queue: `step-${job.kind}`, reason: err.code });
      return 'skipped';
    }
    throw err;
  }

  await failpoint('after_step_claim_commit', { kind: job.kind, operationId: job.operationId, stepId: job.stepId });
  let lost = false;
  const heartbeat = async (): Promise<void> => {
    if (lost) throw new Error('lease lost');
    try {
      await renewTaskCreationStepLease(deps.effects.db, claim, deps.leaseMs);
    } catch (err) {
      lost = true;
      throw err;
    }
  };
  const timer = setInterval(() => {
    heartbeat().catch((err: unknown) =>
      log.warn({ err }, 'lease heartbeat failed; the step will turn unknown if it expires'),
    );
  }, heartbeatEvery(deps.leaseMs));

  const handler = deps.handlers[job.kind] as StepHandler;
  let state: StepState;
  try {
    state = await handler.perform(deps.effects, claim, heartbeat);
  } finally {
    clearInterval(timer);
  }
  deps.metrics?.stepResults.inc({ kind: job.kind, state });
  log.debug({ state, generation: claim.generation }, 'step recorded');
  await enqueueRunnable(deps.effects.db, deps.queues, job.operationId);
  if (state === 'failed') await recoverFailed(deps, job.operationId, log);
  return state;
}

/** Recovery right after a permanent failure. Its errors are logged, not thrown: the step is recorded, and the sweep retries. */
async function recoverFailed(deps: StepWorkerDeps, operationId: string, log: Logger): Promise<void> {
  try {
    const outcomes = await recoverUntilSettled(
      {
        effects: deps.effects,
        handlers: deps.handlers,
        queues: deps.queues,
        log,
        actor: `${deps.workerId}/recover`.slice(0, 200),
        leaseMs: deps.leaseMs,
      },
      operationId,
    );
    log.info(
      { recovery: outcomes.map((o) => o.action ?? o.skipped) },
      'permanent step failure: recovery ran for the operation',
    );
  } catch (err) {
    log.warn({ err }, 'recovery after a permanent step failure failed; the reaper will retry');
  }
}
