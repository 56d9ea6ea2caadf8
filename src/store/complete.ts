/**
 * CompleteTaskCreation: two durable transactions.
 *
 * Phase A — locks workspace 1, operation 4.2, external-ID key 5.1, task 5.2,
 * identity 6, steps 7, environments 11; verifies the handle (or the retained
 * bindings for a worker/recovery actor) and the exact Complete predicate;
 * commits `preparing -> completing` (operation and task). No event.
 * Phase B — reacquires the same set plus the blockers' task rows (5.2,
 * shared, one ascending order with the task's) and outbox 16, requires
 * `completing`, revalidates everything, and runs
 * `completeTaskCreationLocked`: task and operation `completed`, revision one,
 * `task.created` in the outbox — and, when the task awaits its blockers
 * (`tasks.awaits_blockers`) and all of them are done now, revision two and
 * its `task.dependencies_resolved` right after (store/task-done.ts).
 * For a claimant (the worker that starts the agent right after), phase B also
 * takes the launch's dispatch claim with its COMMIT when nothing else could
 * come of it (store/launch-claim-in-complete.ts, ADR 0019): no new lock, the
 * placement read first in the guard's round trip. The worker whose batch
 * committed phase A hands phase B the step rows it verified; phase B sends its
 * verification for them with the guard's locks, and a statement other than the
 * one guessed restarts it (ADR 0021).
 * A completed operation replays its stored outcome and event with no writes.
 * An operation already `completing` is finished by phase B for a caller's
 * handle and for recovery; a worker's wake-up leaves it to the Complete that
 * moved it there (`resumeCompleting: false` -> `creation_state_conflict`, zero
 * writes), so two workers never both run phase B.
 */
import { failpoint } from '../failpoints';
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../canonical/canonical-json';
import { payloadHash } from '../canonical/hash';
import type { CreationPlan } from '../canonical/types';
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import type { Statement } from '../db/batch';
import { runTransaction, type Db, type Tx } from '../db/tx';
import { completionStatements, verifyCompletionLocked } from './complete-verify';
import {
  guardOperationLocked,
  lockTaskChainLocked,
  rememberedPlan,
  type OperationRow,
  type TaskLockRow,
} from './operation-guard';
import { planBlockerIds } from '../plan/blockers';
import { lockStepsLocked } from './step-rows';
import { insertResolvedEventLocked } from './task-done';
import type { CompleteResult, OperationAuthority, StepRow } from './types';
import { readPlacement, rememberPlacement, type LaunchSpecRow, type Placement } from './launch-dispatch';
import { claimInCompleteLocked, type ClaimInComplete, type LaunchClaimant } from './launch-claim-in-complete';
import { inEventOrder, operationEventsStatement, type OperationEventRow } from './outbox-mark';
import { admitAssignments } from './wip-admission';

export interface VerifiedCreation {
  op: OperationRow;
  plan: CreationPlan;
  task: TaskLockRow;
  /** Phase B: the task awaits its blockers and all of them are done now; its resolution follows task.created. */
  resolves: boolean;
}

/** Phase B for a claimant (ADR 0019): what its launch claim needs besides the verified creation. */
interface Seen {
  steps: StepRow[];
  workspaceState: string;
  placement: Promise<Placement> | undefined;
}

function replay(op: OperationRow): CompleteResult {
  return {
    outcome: op.result_outcome === 'CreatedIdentityLost' ? 'CreatedIdentityLost' : 'Created',
    workspaceId: op.workspace_id,
    eventId: op.result_event_id!,
    revision: 1,
    replayed: true,
  };
}

async function lockAndVerifyLocked(
  tx: Tx,
  auth: OperationAuthority,
  phase: 'A' | 'B',
  /** Phase B that may take the launch's claim: the task's placement is read first, in the guard's round trip. */
  claimant?: LaunchClaimant,
  /** The step rows this process committed with phase A: the verification of them goes ahead as a guess (ADR 0021). */
  known?: readonly StepRow[],
): Promise<(VerifiedCreation & { seen: Seen }) | CompleteResult> {
  const operationId = auth.kind === 'handle' ? auth.handle.operationId : auth.operationId;
  const knownPlan = known ? rememberedPlan(operationId) : undefined;
  const guessed = knownPlan ? await completionStatements(tx.dialect, known!, knownPlan) : undefined;
  const placement = claimant ? readPlacement(tx, operationId) : undefined;
  placement?.catch(() => undefined);
  // Phase B may also lock the blockers' task rows; phase A locks the task's own row only.
  const { op, plan, workspaceState, externalIdAbsent, guessSent } = await guardOperationLocked(
    tx,
    auth,
    {
      externalIdKey: true,
      steps: true,
      // Phase B also locks the blockers' task rows, when the plan has any.
      ownTaskOnly: phase === 'A' ? true : (p) => planBlockerIds(p).length === 0,
      // Both phases check Begin's rows: the task's lock reads them too and answers that check (ADR 0034).
      planned: true,
    },
    { guessed },
  );
  if (op.state === 'completed') return replay(op);
  if (phase === 'A' && op.state === 'preparing' && workspaceState !== 'active') {
    // The workspace deletion cascade aborts what is still preparing; a Complete between its phases it finishes.
    throw new ConflictError('workspace_deleting', 'the workspace is being deleted; no creation completes', {
      operation_id: op.id,
    });
  }
  const wanted = phase === 'A' ? 'preparing' : 'completing';
  if (op.state !== wanted && !(phase === 'A' && op.state === 'completing')) {
    throw new ConflictError('creation_state_conflict', `operation is ${op.state}; Complete needs ${wanted}`, {
      operation_id: op.id,
      state: op.state,
    });
  }
  // Phase B also holds the blockers' rows (5.2, shared, one order with the task's): a MarkTaskDone of a blocker
  // either committed before (this phase sees it done) or waits, and then finds this task completed.
  const blockerIds = phase === 'B' ? planBlockerIds(plan) : [];
  const { task, identityState, blockers } = await lockTaskChainLocked(tx, op, {
    externalIdKey: true,
    externalIdAbsent,
    // With a guess sent, the steps' lock is answered next (before the guesses), not after them.
    steps: !guessSent,
    blockers: blockerIds,
    planned: true,
  });
  if (!task || identityState !== 'preparing' || task.lifecycle_state === 'deleted') {
    throw new ConflictError('creation_state_conflict', 'task row or retained identity is not in a completable state', {
      operation_id: op.id,
    });
  }
  const steps = await lockStepsLocked(tx, op.id);
  // One round trip, or none when it went ahead as a guess: the rows read under lock are the ones guessed, so the
  // very statements guessed are the ones asked (any other restarts the command, Tx.batchAhead).
  await verifyCompletionLocked(tx, steps, plan);
  const resolves = task.awaits_blockers && blockers.length > 0 && blockers.every((b) => b.lifecycle_state === 'done');
  return { op, plan, task, resolves, seen: { steps, workspaceState, placement } };
}

/**
 * The locked finalizer: never begins a transaction or takes a lock below the
 * outbox tier. Marks task/identity/operation complete, allocates revision one
 * and inserts the single `task.created` event (unique per task and revision);
 * then a waiting resolution's event at revision two.
 */
export async function completeTaskCreationLocked(
  tx: Tx,
  v: VerifiedCreation,
  /** The `task.created` event's ID (workspace deletion orders it before its `task.deleted` in the outbox tier). */
  givenEventId?: string,
  /**
   * The transaction ends here (phase B of its own): without a resolution to follow, the five writes go with its
   * COMMIT (Tx.commitWith) — the operation row is locked and was read `completing`, so its compare-and-set holds.
   */
  last = false,
  /** Phase B's launch claim (store/launch-claim-in-complete.ts), written after the event, before the events' read. */
  launchClaim: ClaimInComplete | null = null,
): Promise<CompleteResult> {
  const eventId: string = givenEventId ?? randomUUID();
  // The task's last awaited blocker was marked done while it was being created (store/task-done.ts): its
  // task.dependencies_resolved follows task.created, at revision two. Outbox keys are taken in order.
  const resolvedEventId: string | null = v.resolves ? randomUUID() : null;
  for (const id of [eventId, resolvedEventId].filter((x): x is string => x !== null).sort()) {
    tx.lockRow(TIER.OUTBOX, 'event_outbox', id);
  }
  const outcome = v.op.release_applied ? 'CreatedIdentityLost' : 'Created';
  const payload = {
    version: 1,
    type: 'task.created',
    event_id: eventId,
    task_id: v.task.id,
    workspace_id: v.op.workspace_id,
    operation_id: v.op.id,
    revision: 1,
    external_id: outcome === 'Created' ? v.task.external_id : null,
    manifest_hash: v.op.manifest_hash,
    start_policy: v.plan.start_policy,
  };
  // Phase B's launch claim admits the task to its WIP slot in this same write of the task row.
  const admit = last && resolvedEventId === null && launchClaim?.admitsTask ? admitAssignments(tx) : null;
  const writes: Statement[] = [
    {
      sql: `UPDATE tasks SET creation_state = 'completed', revision = 1,
              external_id_settled_at = CASE WHEN external_id IS NULL THEN NULL ELSE ${tx.now} END,${admit ? ` ${admit.sql},` : ''} updated_at = ${tx.now}
        WHERE id = ? AND creation_state = 'completing'`,
      params: [...(admit?.params ?? []), v.task.id],
    },
    {
      sql: `UPDATE task_identities SET state = 'completed', updated_at = ${tx.now} WHERE task_id = ?`,
      params: [v.task.id],
    },
    {
      sql: `INSERT INTO task_revisions (task_id, revision, workspace_id, kind, operation_id, event_id, created_at) VALUES (?, 1, ?, 'created', ?, ?, ${tx.now})`,
      params: [v.task.id, v.op.workspace_id, v.op.id, eventId],
    },
    {
      sql: `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at)
       VALUES (?, ?, ?, 1, 'task.created', ?, ?, ?, ${tx.now})`,
      params: [eventId, v.op.workspace_id, v.task.id, v.op.id, canonicalJson(payload), payloadHash(payload)],
    },
    {
      sql: `UPDATE task_creation_operations SET state = 'completed', result_outcome = ?, result_revision = 1, result_event_id = ?,
              completed_at = ${tx.now}, updated_at = ${tx.now}
        WHERE id = ? AND state = 'completing'`,
      params: [outcome, eventId, v.op.id],
    },
  ];
  const result: CompleteResult = { outcome, workspaceId: v.op.workspace_id, eventId, revision: 1, replayed: false };
  if (last && resolvedEventId === null) {
    // The delivery pass's read closes the list: the event just written, with its armed intents (ADR 0007).
    const claimed = launchClaim?.statements ?? [];
    const committed = tx.commitWith([
      ...writes,
      ...claimed,
      operationEventsStatement(tx.dialect, v.op.workspace_id, v.op.id),
    ]);
    const events = committed.then((r) => inEventOrder((r[r.length - 1]?.rows ?? []) as unknown as OperationEventRow[]));
    // The launch spec's read closes the claim's statements (the row before the events').
    const launch = launchClaim
      ? committed.then((r) => launchClaim.claimOf(r[r.length - 2]?.rows?.[0] as LaunchSpecRow | undefined))
      : undefined;
    // Handled here: an attempt whose COMMIT failed is retried or thrown by the runner; no one awaits its events.
    events.catch(() => undefined);
    launch?.catch(() => undefined);
    return { ...result, events, launch };
  }
  // Issued together: one round trip, run by the server strictly in this order (Tx.batch); the first that fails
  // stops the rest and its error propagates, as if each had been awaited in turn.
  const [, , , , changed] = await Promise.all(writes.map((w) => tx.exec(w.sql, [...w.params])));
  if (changed !== 1)
    throw new ConflictError('creation_state_conflict', 'operation left completing concurrently', {
      operation_id: v.op.id,
    });
  if (resolvedEventId !== null) {
    await tx.exec(`UPDATE tasks SET revision = 2, awaits_blockers = ?, updated_at = ${tx.now} WHERE id = ?`, [
      false,
      v.task.id,
    ]);
    await insertResolvedEventLocked(tx, {
      eventId: resolvedEventId,
      taskId: v.task.id,
      workspaceId: v.op.workspace_id,
      operationId: v.op.id,
      revision: 2,
      startPolicy: v.plan.start_policy,
      resolvedBy: null,
    });
  }
  return result;
}

/** Phase A's two writes, `preparing -> completing` (also the batch's, store/complete-in-batch.ts). */
export function phaseAWrites(tx: Tx, operationId: string, taskId: string): Statement[] {
  return [
    {
      sql: `UPDATE task_creation_operations SET state = 'completing', completing_at = ${tx.now}, updated_at = ${tx.now} WHERE id = ? AND state = 'preparing'`,
      params: [operationId],
    },
    {
      sql: `UPDATE tasks SET creation_state = 'completing', updated_at = ${tx.now} WHERE id = ? AND creation_state = 'preparing'`,
      params: [taskId],
    },
  ];
}

/**
 * Phase A only (exposed so recovery and tests can stop between the phases): `completing` when this call moved the
 * operation there, `already_completing` when it found it there (another Complete is between its phases, or died
 * there), nothing written.
 */
export async function completeTaskCreationPhaseA(
  db: Db,
  auth: OperationAuthority,
): Promise<CompleteResult | 'completing' | 'already_completing'> {
  return runTransaction(db, 'CompleteTaskCreation.A', async (tx) => {
    const v = await lockAndVerifyLocked(tx, auth, 'A');
    if ('outcome' in v) return v;
    if (v.op.state === 'completing') return 'already_completing';
    // Sent with COMMIT, in this order (Tx.commitWith): both rows are locked and were read `preparing` above.
    void tx.commitWith(phaseAWrites(tx, v.op.id, v.task.id));
    return 'completing';
  });
}

/**
 * Phase B only: requires `completing` (or replays `completed`). A `claimant` (the worker that starts the agent
 * right after) may have the launch's dispatch claim written with the event (`CompleteResult.launch`, ADR 0019).
 */
export async function completeTaskCreationPhaseB(
  db: Db,
  auth: OperationAuthority,
  claimant?: LaunchClaimant,
  /** The step rows as this process committed them with phase A (store/complete-in-batch.ts), for ADR 0021's guess. */
  known?: readonly StepRow[],
): Promise<CompleteResult> {
  let guess = known;
  return runTransaction(db, 'CompleteTaskCreation.B', async (tx) => {
    // Only the first attempt guesses: after a restart (a missed guess among its causes) the rows are read first.
    const steps = guess;
    guess = undefined;
    const v = await lockAndVerifyLocked(tx, auth, 'B', claimant, steps);
    if ('outcome' in v) return v;
    let launchClaim: ClaimInComplete | null = null;
    if (claimant && v.seen.placement) {
      const placement = await v.seen.placement;
      rememberPlacement(placement);
      launchClaim = claimInCompleteLocked(tx, v, { ...v.seen, placement }, claimant);
    }
    return completeTaskCreationLocked(tx, v, undefined, true, launchClaim);
  });
}

export interface CompleteOptions {
  /** The worker that starts the agent right after: phase B may take the launch's claim for it (ADR 0019). */
  claimant?: LaunchClaimant;
  /**
   * Finish an operation another Complete left between its phases (default true: a caller's handle, recovery's
   * `complete_completing`). A worker's wake-up passes false: the Complete that moved it to `completing` finishes it,
   * and the reaper's `complete_completing` if that one died; two workers never both run phase B.
   */
  resumeCompleting?: boolean;
}

export async function completeTaskCreation(
  db: Db,
  auth: OperationAuthority,
  options: CompleteOptions = {},
): Promise<CompleteResult> {
  const a = await completeTaskCreationPhaseA(db, auth);
  if (a === 'already_completing' && options.resumeCompleting === false) {
    throw new ConflictError('creation_state_conflict', 'another Complete is between its phases', {
      operation_id: auth.kind === 'handle' ? auth.handle.operationId : auth.operationId,
    });
  }
  if (a !== 'completing' && a !== 'already_completing') return a;
  await failpoint('between_complete_phase_a_and_b', {
    operationId: auth.kind === 'handle' ? auth.handle.operationId : auth.operationId,
  });
  return completeTaskCreationPhaseB(db, auth, options.claimant);
}
