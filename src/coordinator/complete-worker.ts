/**
 * Processes a Complete wake-up as the operation's worker actor (no caller
 * handle; the Store re-derives the retained bindings): phase A then phase B,
 * or a replay — or phase B alone, right after this worker's ledger batch
 * committed phase A with the step that armed the launch intent. Then it
 * wakes the workspace's outbox dispatcher. A premature or duplicate wake-up is
 * a logged no-op. A process that also runs the outbox role delivers the
 * workspace's outbox right here (`dispatchInPlace`) instead of one BullMQ hop;
 * if that fails, the dispatcher wake-up is queued as before, and the reaper's
 * sweep heals a crash in between. A process that also runs the launch role is
 * phase B's claimant: phase B takes the launch's dispatch claim with the event
 * (ADR 0019) and the delivery starts the agent under it. Failpoint
 * `after_complete_before_outbox_delivery` sits between the phase-B commit
 * and the announcement/dispatcher wake-up.
 */
import type { CompleteJob } from '../../queues/names';
import type { Db } from '../db/tx';
import { isTaskLedgerError } from '../domain/errors';
import { failpoint } from '../failpoints';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import { completeTaskCreation, completeTaskCreationPhaseB } from '../store/complete';
import type { QueueSet } from './queues';
import { wakeOutbox, type OutboxWaker } from './wake-outbox';
import type { OperationEventRow } from '../store/outbox-mark';
import type { DispatchClaim } from '../store/launch-dispatch';
import type { LaunchClaimant } from '../store/launch-claim-in-complete';
import type { StepRow } from '../store/types';

export interface CompleteWorkerDeps {
  db: Db;
  queues: QueueSet;
  log: Logger;
  metrics: Metrics | null;
  workerId: string;
  /**
   * Deliver the workspace's outbox in this process after phase B (the fleet sets it when the process also runs the
   * outbox role). It throws only for what a queued dispatcher would retry.
   */
  dispatchInPlace?: OutboxWaker['dispatchInPlace'];
  /**
   * Set when this process also starts the agent in that delivery (the launch role): phase B then takes the launch's
   * dispatch claim for it (ADR 0019). A claim the delivery does not use is left to its lease and dispatch recovery.
   */
  claimant?: LaunchClaimant;
}

export async function processCompleteJob(
  deps: CompleteWorkerDeps,
  job: CompleteJob,
  /**
   * `phaseADone`: this worker's own ledger batch committed phase A (store/complete-in-batch.ts); B is left. `steps`:
   * the step rows that batch verified, from which phase B guesses its verification (ADR 0021).
   */
  options: { phaseADone?: boolean; steps?: readonly StepRow[] } = {},
): Promise<'completed' | 'skipped'> {
  const log = deps.log.child({ operation_id: job.operationId });
  const auth = { kind: 'operation', operationId: job.operationId, actor: deps.workerId } as const;
  let workspaceId: string;
  let events: OperationEventRow[] | undefined;
  let taken: DispatchClaim | undefined;
  try {
    // Another worker's Complete between its phases is left to finish (or to the reaper's complete_completing).
    const result = options.phaseADone
      ? await phaseBAfterBatch(auth)
      : await completeTaskCreation(deps.db, auth, { resumeCompleting: false, claimant: deps.claimant });
    workspaceId = result.workspaceId;
    // Settled with phase B's COMMIT (before it returned): the rows the delivery pass below would read.
    events = await result.events?.catch(() => undefined);
    taken = await result.launch?.catch(() => undefined);
    log.info({ outcome: result.outcome, event_id: result.eventId, replayed: result.replayed }, 'creation complete');
    // Phase B (task.created in the outbox) has committed; nothing has woken the dispatcher yet. A crash here is
    // healed by the reaper's sweep, which wakes a dispatcher for every workspace with undelivered events.
    await failpoint('after_complete_before_outbox_delivery', {
      operationId: job.operationId,
      eventId: result.eventId,
      replayed: result.replayed,
    });
    // Wakes a request waiting for this creation now rather than at its next poll.
    await deps.queues.creationEvents
      .announce(job.operationId)
      .catch((err: unknown) => log.warn({ err }, 'could not announce the completed creation; waiters will poll'));
  } catch (err) {
    if (isTaskLedgerError(err) && ['creation_state_conflict', 'stale_claim', 'workspace_deleting'].includes(err.code)) {
      log.info({ reason: err.code, detail: err.message }, 'complete job not applicable: nothing to do');
      deps.metrics?.jobsSkipped.inc({ queue: 'complete', reason: err.code });
      return 'skipped';
    }
    throw err;
  }
  // This creation's events only: another creation's are its own Complete's (or a queued pass's) to deliver.
  await wakeOutbox(
    { queues: deps.queues, log, dispatchInPlace: deps.dispatchInPlace },
    workspaceId,
    job.operationId,
    events,
    taken,
  );
  return 'completed';

  async function phaseBAfterBatch(auth: { kind: 'operation'; operationId: string; actor: string }) {
    // The same point between the phases as completeTaskCreation's (a crash here leaves `completing` to the reaper).
    await failpoint('between_complete_phase_a_and_b', { operationId: job.operationId });
    return completeTaskCreationPhaseB(deps.db, auth, deps.claimant, options.steps);
  }
}
