/**
 * Processes one step wake-up: claim (lease + generation) and commit, perform
 * the effect outside any transaction while a heartbeat renews the lease,
 * record by compare-and-set (inside the handler), then send the wake-ups the
 * operation needs next. A kind whose effect lives only in the ledger
 * (`applyInClaim`) is claimed, performed and recorded in one transaction
 * instead (store/ledger-step.ts); in a worker that also completes, the batch
 * that arms the launch intent commits Complete's phase A too, and phase B
 * follows here (ADR 0016). The batch also claims the operation's first-attempt
 * steps whose effect is outside the ledger (a Git worktree, a provider call),
 * leased and committed with it; they are performed here right after, as
 * after a claim of their own, instead of one queue hop and one claim
 * transaction each (ADR 0040); with one such step, its record opens the
 * ledger batch that arms the launch intent and runs phase A (ADR 0041). A
 * duplicate or stale job finds the step already
 * claimed or finished, does nothing, and says so in the log. A permanent
 * `failed` starts recovery of the operation at once (compensate, then Abort)
 * instead of waiting for the next sweep; if another step is still running,
 * the claim finds `claim_in_flight` and the reaper finishes it later.
 */
import { failpoint } from '../failpoints';
import { isTaskLedgerError, isTransientError } from '../domain/errors';
import { LEDGER_ONLY_KINDS, type StepKind, type StepState } from '../domain/vocab';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { StepHandlers } from '../kinds/registry';
import type { EffectDeps, MarkerWithClaim, StepHandler } from '../kinds/contract';
import { recoverUntilSettled } from '../runtime/recover';
import {
  claimAndApplyLedgerStep,
  claimAndApplyLedgerSteps,
  recordAndApplyLedgerSteps,
  type LedgerBatchResult,
  type LedgerKinds,
} from '../store/ledger-step';
import type { EffectOutcome } from '../store/effects/recording';
import { recordHeldAlone } from '../store/held-record';
import type { HeldRecord, RecordHeld } from '../store/ledger-apply';
import { claimTaskCreationStep, renewTaskCreationStepLease } from '../store/step-claims';
import type { StepClaim, StepRow } from '../store/types';
import { hintOperation } from '../store/operation-guard';
import { stepJobId, type StepJob } from '../../queues/names';
import { processCompleteJob, type CompleteWorkerDeps } from './complete-worker';
import { enqueueRunnable } from './enqueue';
import { leaseKeeper } from './lease-keeper';
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
  /**
   * Run the launch intent and Complete of an operation in this process once
   * they are its only work left (the fleet sets this); without it every next
   * step and Complete goes through its BullMQ queue.
   */
  inline?: InlineWork;
}

export interface InlineWork {
  complete: CompleteWorkerDeps;
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
  const handler = deps.handlers[job.kind] as StepHandler | undefined;
  const auth = { kind: 'operation', operationId: job.operationId, actor: deps.workerId } as const;
  const ref = { kind: job.kind, stepKey: job.stepKey };
  const owner = `${deps.workerId}/${jobId}`;
  const skipped = (err: unknown): boolean => {
    if (!isTaskLedgerError(err) || !CLAIM_CONFLICTS.has(err.code)) return false;
    log.info({ reason: err.code, detail: err.message }, 'duplicate or stale step job: nothing to do');
    deps.metrics?.jobsSkipped.inc({ queue: `step-${job.kind}`, reason: err.code });
    return true;
  };

  // Begin's own knowledge of the operation, checked by the guard under its locks (ADR 0020).
  if (job.hint) hintOperation(job.operationId, job.hint);
  let state: StepState;
  let failed = false;
  // The batch armed the launch intent, which it does only once every other step succeeded: Complete is due.
  let completeDue = false;
  // The batch also ran Complete's phase A (the operation is `completing`): phase B is this worker's to run.
  let phaseADone = false;
  // The step rows that phase A verified and committed: phase B guesses its verification from them (ADR 0021).
  let verifiedSteps: readonly StepRow[] | undefined;
  // Effect steps the ledger batch claimed with itself: performed here once it committed (ADR 0040).
  let claimedWithBatch: StepClaim[] = [];
  // Before the batch's claims: their leases are counted from no later than this (lease-keeper.ts).
  const batchStartedAt = Date.now();
  // The ledger batch's findings: Complete due, phase A done, the rows it verified (from the batch this job opened,
  // or from the one its effect's record opened, ADR 0041).
  const absorb = (batch: LedgerBatchResult, counted: number) => {
    const done = batch.results;
    phaseADone = batch.phaseA === 'completing';
    verifiedSteps = batch.steps;
    if (batch.phaseA !== null && batch.phaseA !== 'not_asked') {
      deps.metrics?.phaseAInBatch.inc({ result: batch.phaseA });
      if (!phaseADone) log.debug({ phase_a: batch.phaseA }, 'phase A left to Complete');
    }
    for (const d of done.slice(counted)) deps.metrics?.stepResults.inc({ kind: d.claim.kind, state: d.outcome.state });
    failed ||= done.some((d) => d.outcome.state === 'failed');
    completeDue = done.some((d) => d.claim.kind === 'launch_intent' && d.outcome.state === 'armed');
    if (done.length > 1) log.debug({ batch: done.map((d) => `${d.claim.kind}:${d.outcome.state}`) }, 'ledger batch');
  };
  // One effect performed here, by a worker that runs the operation's next steps itself: its record opens the ledger
  // batch that arms the launch intent and runs phase A (ADR 0041).
  const recordFor = (claim: StepClaim): RecordHeld | undefined =>
    deps.inline === undefined
      ? undefined
      : async (held) => {
          const recorded = await recordWithNext(deps, claim, held, owner, log);
          if (recorded.batch) absorb(recorded.batch, 1);
          return recorded.outcome;
        };
  if (handler?.applyInClaim) {
    // A ledger-only effect: claim, perform and record in one transaction (store/ledger-step.ts), together with the
    // operation's other ledger-only steps that are runnable now.
    try {
      const batch = handler.applyLocks
        ? await claimAndApplyLedgerSteps(
            deps.effects.db,
            auth,
            ref,
            owner,
            deps.leaseMs,
            ledgerKindsOf(deps.handlers),
            {
              phaseA: deps.inline !== undefined,
              effects: (kind) => effectOf(deps.handlers, kind),
            },
          )
        : {
            results: [
              await claimAndApplyLedgerStep(deps.effects.db, auth, ref, owner, deps.leaseMs, handler.applyInClaim),
            ],
            phaseA: null,
            claimed: [],
          };
      claimedWithBatch = batch.claimed;
      state = batch.results[0]!.outcome.state;
      absorb(batch, 1);
    } catch (err) {
      if (skipped(err)) return 'skipped';
      throw err;
    }
  } else {
    let claim: StepClaim;
    const claimedAt = Date.now();
    try {
      claim = await claimTaskCreationStep(deps.effects.db, auth, ref, owner, deps.leaseMs);
    } catch (err) {
      if (skipped(err)) return 'skipped';
      throw err;
    }
    state = await performClaimed(deps, handler as StepHandler, claim, claimedAt, job, log, recordFor(claim));
  }
  deps.metrics?.stepResults.inc({ kind: job.kind, state });
  log.debug({ state }, 'step recorded');
  failed ||= state === 'failed';
  if (claimedWithBatch.length > 0) {
    // One claimed effect's record may open the next batch; several record on their own (their batches would race).
    const record = claimedWithBatch.length === 1 ? recordFor(claimedWithBatch[0]!) : undefined;
    failed = (await performClaimedWithBatch(deps, claimedWithBatch, batchStartedAt, job, log, record)) || failed;
  }
  if (deps.inline && completeDue) await completeInline(deps.inline, job.operationId, log, phaseADone, verifiedSteps);
  else if (deps.inline && !failed) await continueInline(deps, deps.inline, job.operationId, log);
  else await enqueueRunnable(deps.effects.db, deps.queues, job.operationId);
  if (failed) await recoverFailed(deps, job.operationId, log);
  return state;
}

/** The handlers' ledger-only kinds that can join a batch (an apply, its locks and its first reads). */
export function ledgerKindsOf(handlers: StepHandlers): LedgerKinds {
  const kinds: LedgerKinds = {};
  for (const h of Object.values(handlers) as StepHandler[]) {
    if (h.applyInClaim && h.applyLocks)
      kinds[h.kind] = { apply: h.applyInClaim, locks: h.applyLocks, reads: h.applyReads };
  }
  return kinds;
}

/** A kind this worker performs outside the ledger (a handler without a one-transaction apply), and its marker. */
function effectOf(handlers: StepHandlers, kind: StepKind): { marker?: MarkerWithClaim } | null {
  const h = (handlers as Partial<Record<StepKind, StepHandler>>)[kind];
  if (h === undefined || h.applyInClaim !== undefined) return null;
  return h.markerWithClaim ? { marker: h.markerWithClaim } : {};
}

/**
 * Performs the effect steps a ledger batch claimed with itself, concurrently, each exactly as after a claim of its
 * own (its lease renewed while it runs, its record by compare-and-set). True when one failed permanently. Every one
 * is awaited before an error is thrown: a claim whose perform threw keeps its lease, which expires to `unknown`
 * for the reaper to observe, as when a step job fails after its claim.
 */
async function performClaimedWithBatch(
  deps: StepWorkerDeps,
  claims: readonly StepClaim[],
  claimedAt: number,
  job: StepJob,
  log: Logger,
  record?: RecordHeld,
): Promise<boolean> {
  const settled = await Promise.allSettled(
    claims.map((claim) =>
      performClaimed(
        deps,
        deps.handlers[claim.kind] as StepHandler,
        claim,
        claimedAt,
        { ...job, stepId: claim.stepId, kind: claim.kind, stepKey: claim.stepKey, generation: claim.generation - 1 },
        log.child({ step_id: claim.stepId, kind: claim.kind, claimed_with: job.stepId }),
        record,
      ),
    ),
  );
  let failed = false;
  settled.forEach((r, i) => {
    if (r.status === 'fulfilled') {
      deps.metrics?.stepResults.inc({ kind: claims[i]!.kind, state: r.value });
      failed ||= r.value === 'failed';
    }
  });
  const thrown = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (thrown) throw thrown.reason;
  return failed;
}

/**
 * A performed effect's record in the ledger batch that goes on with the operation (`recordAndApplyLedgerSteps`:
 * its ledger-only steps, the launch intent, phase A). When that transaction meets a conflict — in what follows
 * the record, or in the record itself — it wrote nothing, and the record runs again alone, which answers for
 * itself (a stale claim then throws as it always did). Any other error (the database down, a COMMIT whose outcome
 * is unknown) is the record's, as it was in the record's own transaction.
 */
async function recordWithNext(
  deps: StepWorkerDeps,
  claim: StepClaim,
  held: HeldRecord,
  owner: string,
  log: Logger,
): Promise<{ outcome: EffectOutcome; batch?: LedgerBatchResult }> {
  try {
    const batch = await recordAndApplyLedgerSteps(
      deps.effects.db,
      claim,
      held,
      owner,
      deps.leaseMs,
      ledgerKindsOf(deps.handlers),
      { phaseA: true },
    );
    return { outcome: batch.results[0]!.outcome, batch };
  } catch (err) {
    // A database fault (a lost connection, a COMMIT whose outcome is unknown) is not a conflict: the batch may have
    // committed, so the record is not run again; the lease expires and the reaper observes, as after any record.
    if (!isTaskLedgerError(err) || isTransientError(err)) throw err;
    log.debug({ err }, 'the record with the next ledger steps met a conflict; recording alone');
    return { outcome: await recordHeldAlone(deps.effects.db, claim, held) };
  }
}

/** Claim errors that mean another worker or the ledger already moved on: the job is a logged no-op. */
const CLAIM_CONFLICTS = new Set(['creation_state_conflict', 'stale_claim', 'not_found', 'workspace_deleting']);

/** A committed claim's effect, outside any transaction, with the lease renewed while it runs (lease-keeper.ts). */
async function performClaimed(
  deps: StepWorkerDeps,
  handler: StepHandler,
  claim: StepClaim,
  claimedAt: number,
  job: StepJob,
  log: Logger,
  record?: RecordHeld,
): Promise<StepState> {
  await failpoint('after_step_claim_commit', { kind: job.kind, operationId: job.operationId, stepId: job.stepId });
  const lease = leaseKeeper(
    () => renewTaskCreationStepLease(deps.effects.db, claim, deps.leaseMs),
    deps.leaseMs,
    claimedAt,
  );
  const timer = setInterval(() => {
    lease
      .renew()
      .catch((err: unknown) => log.warn({ err }, 'lease heartbeat failed; the step will turn unknown if it expires'));
  }, heartbeatEvery(deps.leaseMs));

  try {
    return await handler.perform(deps.effects, claim, () => lease.heartbeat(), record);
  } finally {
    clearInterval(timer);
  }
}

/**
 * The operation's next wake-ups, except that work which is cheap and needs no
 * I/O beyond the ledger — its due ledger-only steps (one transaction each;
 * the launch intent once every other step succeeded) and then Complete —
 * runs right here instead of one BullMQ hop each. It goes through exactly the
 * same claim, record and Complete paths as a queued job, so nothing about the
 * ledger changes: two workers reaching the same point find one claim or
 * Complete already done (a logged no-op), and a crash here leaves what a
 * crashed queued job leaves (nothing, for a ledger-only step; the sweep
 * re-sends the wake-up).
 */
async function continueInline(
  deps: StepWorkerDeps,
  inline: InlineWork,
  operationId: string,
  log: Logger,
): Promise<void> {
  const next = await enqueueRunnable(deps.effects.db, deps.queues, operationId, {
    keep: (s) => LEDGER_ONLY_KINDS.has(s.kind),
    keepComplete: true,
  });
  // The first due one; its own pass through here runs the next, and the armed launch intent's runs Complete.
  const [first] = next.kept;
  if (first) await processStepJob(deps, first, `inline-${stepJobId(first.stepId, first.generation)}`);
  if (next.completeKept) await completeInline(inline, operationId, log);
}

async function completeInline(
  inline: InlineWork,
  operationId: string,
  log: Logger,
  phaseADone = false,
  steps?: readonly StepRow[],
): Promise<void> {
  await processCompleteJob(inline.complete, { operationId }, { phaseADone, steps }).catch((err: unknown) => {
    // The operation is untouched or completing: the complete job the sweep sends finishes it.
    log.warn({ err }, 'inline Complete failed; the sweep will wake a Complete worker');
  });
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
