/**
 * LaunchTask's ledger side: dispatch claims (`task_launch_dispatch_claims`,
 * unique per operation/task/session, idempotency key
 * `task-launch/<creation-operation-id>/<session-id>`).
 *
 * claimLaunchDispatch — locks workspace 1 (share), the task's workflow step 2
 * (FOR UPDATE, its WIP admission lock, only when the step has a limit),
 * completed creation operation 4.2, task 5.2, identity 6, the armed launch
 * intent 7, the dispatch claim 8.2 (inserted when absent), the session 9. It
 * requires: an active workspace, operation `completed`, revision one and its
 * `task.created` committed, the task live, the launch intent `armed` with
 * exact evidence for this session. The WIP gate (store/wip-admission.ts): a
 * task that holds no slot takes a free one (`wip_admitted`), or, with none
 * free, is put in its step's queue and the claim answers `{queued}` (that is
 * the only write). Then `planned|retry_wait -> running` (generation + 1,
 * lease) and session `prepared -> starting`. Anything else: a typed refusal,
 * zero writes. The placement (the task's step and its limit) is read in the
 * guard's round trip, so the admission lock is chosen from a guess (the
 * plan's step, and whether this process last saw it limited); a guess that
 * left a limited step unlocked, or a task moved between that read and its
 * lock, writes nothing and restarts the command with what was read.
 * The record (`running -> succeeded`, the runtime row) is in
 * store/launch-record.ts. failLaunchDispatch — `running ->
 * retry_wait` (authenticated no-dispatch proof) or `unknown`.
 * The check right before the runtime is started that the claim is still
 * live (confirmLaunchDispatchClaim) is in store/launch-confirm.ts. The claim also
 * reads the launch spec (agent profile, session environment, worktree) with
 * the session's lock, so the start needs no read of its own; its writes
 * travel with COMMIT, the claim's compare-and-set checked there
 * (`Tx.expect`), as do the record's. claimLaunchDispatch with an expected
 * generation refuses a wake-up sent for another generation (a stale launch
 * job).
 * No event is written; the agent never starts before `task.created` exists.
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { domainHash } from '../canonical/hash';
import type { LaunchIntentRequest } from '../canonical/types';
import type { DispatchClaim, LaunchSpecRow } from './types';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db, type Tx } from '../db/tx';
import type { Statement } from '../db/batch';
import { verifyStoredEvidence } from './complete-verify';
import {
  guardOperationLocked,
  rememberedPlan,
  lockTaskChainLocked,
  type GuardOptions,
  type OperationRow,
} from './operation-guard';
import { admitStatement, admittedCountLocked, enqueueLocked } from './wip-admission';
import { lockStepsLocked, verifyStepRequest } from './step-rows';
import { claimVerified } from './claim-verified';

export const DISPATCH_EVIDENCE_DOMAIN = 'kandev/task-launch-dispatch-evidence/v1';

export type { DispatchClaim, LaunchSpecRow } from './types';

export const LAUNCH_SPEC_SQL = `SELECT (SELECT executor_json FROM agent_profiles WHERE id = ?) AS executor_json,
        (SELECT environment_id FROM task_sessions WHERE id = ?) AS environment_id,
        (SELECT r.worktree_path FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id
          WHERE e.task_id = ? AND r.worktree_path IS NOT NULL ORDER BY r.id LIMIT 1) AS worktree_path`;

export interface RuntimeProof {
  pid: number | null;
  /** Canonical-JSON-able runtime handle (executor kind, pid, start marker path, ...). */
  handle: Record<string, unknown>;
  startMarkerSha256: string;
}

export type DispatchRefusal = { refused: string };
/** The task's step has no free WIP slot: it waits in the step's queue (written), and promotion launches it. */
export type DispatchQueued = { queued: string };

export function dispatchIdempotencyKey(operationId: string, sessionId: string): string {
  return `task-launch/${operationId}/${sessionId}`;
}

/**
 * Locks the LaunchTask prefix (workspace 1 .. steps 7) and checks that a
 * launch is legal for this session; exported for launch-dispatch recovery.
 */
export async function lockLaunchPrefixLocked<X = undefined>(
  tx: Tx,
  operationId: string,
  sessionId: string,
  actor: string,
  options: GuardOptions = {},
  /** A plain read of the caller's (given the task ID), sent with the prefix's own reads. */
  alongside?: (taskId: string) => Statement,
) {
  // The revision and event reads (and the caller's) travel in the guard's first round trip, after the chain.
  const reads = (taskId: string): Statement[] => [
    { sql: 'SELECT event_id FROM task_revisions WHERE task_id = ? AND revision = 1', params: [taskId] },
    {
      sql: "SELECT event_id FROM event_outbox WHERE task_id = ? AND revision = 1 AND type = 'task.created'",
      params: [taskId],
    },
    ...(alongside ? [alongside(taskId)] : []),
  ];
  const { op, plan, workspaceState } = await guardOperationLocked(
    tx,
    { kind: 'operation', operationId, actor },
    { externalIdKey: false, steps: true },
    { ...options, aheadReads: reads },
  );
  if (op.state !== 'completed') return { refused: `operation is ${op.state}, not completed` } as const;
  const { task } = await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
  if (!task || task.lifecycle_state === 'deleted') return { refused: 'task is not live' } as const;
  const [revision, event, extra] = await Promise.all(reads(op.task_id).map((r) => tx.one(r.sql, [...r.params])));
  if (!revision || !event) return { refused: 'revision one or its task.created is not committed' } as const;
  const steps = await lockStepsLocked(tx, op.id);
  const intent = steps.find((s) => s.kind === 'launch_intent' && s.step_key === sessionId);
  if (!intent || intent.state !== 'armed') return { refused: 'no armed launch intent for this session' } as const;
  const request = verifyStepRequest(intent, plan) as LaunchIntentRequest;
  verifyStoredEvidence({ ...intent, state: 'succeeded' });
  return { op, task, intent, request, steps, workspaceState, extra: extra as X | undefined };
}

export interface Placement {
  stepId: string | null;
  /** The step counts admitted tasks (a WIP limit above zero): a launch there takes its admission lock (tier 2). */
  limited: boolean;
  wipLimit: number;
}

/** The task's workflow step and whether it has a WIP limit, read as the claim's first statement (no lock). */
export async function readPlacement(tx: Tx, operationId: string): Promise<Placement> {
  const row = await tx.one<{ workflow_step_id: string | null; wip_limit: number | string | null }>(
    `SELECT t.workflow_step_id, s.wip_limit FROM task_creation_operations o
       JOIN tasks t ON t.id = o.task_id LEFT JOIN workflow_steps s ON s.id = t.workflow_step_id
      WHERE o.id = ?`,
    [operationId],
  );
  const stepId = row?.workflow_step_id ?? null;
  const wipLimit = Number(row?.wip_limit ?? 0);
  return { stepId, limited: stepId !== null && wipLimit > 0, wipLimit };
}

/** Why 1024: one entry per workflow step a process launched into recently. */
const STEP_LIMITS_CAPACITY = 1024;
/** Whether each workflow step had a WIP limit when this process last read it (a guess, re-read by every claim). */
const stepLimited = new Map<string, boolean>();

export function rememberPlacement(p: Placement): void {
  if (p.stepId === null) return;
  stepLimited.delete(p.stepId);
  stepLimited.set(p.stepId, p.limited);
  if (stepLimited.size > STEP_LIMITS_CAPACITY) stepLimited.delete(stepLimited.keys().next().value as string);
}

/**
 * Where the task probably is before anything is read: the step the plan placed it in (this process verified
 * the plan at Complete; tasks rarely move before their launch) and whether that step had a limit when last read.
 */
function guessPlacement(operationId: string): Placement {
  const stepId = rememberedPlan(operationId)?.workflow_step_id ?? null;
  return { stepId, limited: stepId !== null && stepLimited.get(stepId) === true, wipLimit: 0 };
}

type ClaimAttempt = DispatchClaim | DispatchRefusal | DispatchQueued | { moved: Placement };

async function claimOnceLocked(
  tx: Tx,
  target: { operationId: string; sessionId: string },
  owner: string,
  leaseMs: number,
  expectedGeneration: number | undefined,
  /** Where the previous attempt found the task; otherwise a guess (`guessPlacement`). */
  known: Placement | undefined,
): Promise<ClaimAttempt> {
  // The admission lock (tier 2) comes before the operation's, so it is chosen before the placement is read: the
  // read travels as the first statement of the guard's round trip, and an attempt whose choice was wrong (a
  // limited step it did not lock) writes nothing and starts over with what it read.
  const guess = known ?? guessPlacement(target.operationId);
  type ClaimRow = { id: string; state: string; generation: number; lifecycle_generation: number };
  const placementRead = readPlacement(tx, target.operationId);
  placementRead.catch(() => undefined);
  // The claim row, if one exists, is read under the operation's lock, with the prefix's own reads.
  const p = await lockLaunchPrefixLocked<ClaimRow>(
    tx,
    target.operationId,
    target.sessionId,
    owner,
    guess.limited ? { admissionStepId: guess.stepId! } : {},
    (taskId) => ({
      sql: 'SELECT id, state, generation, lifecycle_generation FROM task_launch_dispatch_claims WHERE creation_operation_id = ? AND task_id = ? AND session_id = ?',
      params: [target.operationId, taskId, target.sessionId],
    }),
  );
  const placement = await placementRead;
  rememberPlacement(placement);
  const limited = placement.limited;
  if (limited && (!guess.limited || guess.stepId !== placement.stepId)) return { moved: placement };
  if ('refused' in p) return { refused: p.refused as string };
  if (p.workspaceState !== 'active') return { refused: `workspace is ${p.workspaceState}` };
  // A task marked done before its agent started launches nothing (MarkTaskDone cancels its pending claim).
  if (p.task.lifecycle_state !== 'live') return { refused: `task is ${p.task.lifecycle_state}` };
  // The task moved between the placement read and its lock: the lock taken may be the wrong step's. Start over.
  if (p.task.workflow_step_id !== placement.stepId) return { moved: placement };
  const op: OperationRow = p.op;
  const idem = dispatchIdempotencyKey(op.id, target.sessionId);
  const existing = p.extra;
  let row: Pick<ClaimRow, 'id' | 'state' | 'generation'> | undefined = existing;
  if (existing) {
    tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', existing.id);
    const locked = (await tx.one<ClaimRow>(
      'SELECT id, state, generation, lifecycle_generation FROM task_launch_dispatch_claims WHERE id = ? FOR UPDATE',
      [existing.id],
    ))!;
    row = locked;
    if (locked.state !== 'planned' && locked.state !== 'retry_wait') {
      return { refused: `dispatch claim is ${locked.state}` };
    }
    // The launch is bound to the task's lifecycle generation it was claimed for (spec: "the armed launch intent
    // matches that lifecycle generation"): a task whose lifecycle moved on launches nothing under this claim.
    if (Number(locked.lifecycle_generation) !== p.task.lifecycle_generation) {
      return {
        refused: `the task's lifecycle generation is ${p.task.lifecycle_generation}, the claim's ${locked.lifecycle_generation}`,
      };
    }
    if (expectedGeneration !== undefined && Number(row.generation) !== expectedGeneration) {
      return { refused: `stale launch job for generation ${expectedGeneration}; the claim is at ${row.generation}` };
    }
  }
  // The WIP gate (store/wip-admission.ts): a task without a slot takes a free one or waits in its step's queue.
  const admit = !p.task.wip_admitted;
  if (admit && limited && (await admittedCountLocked(tx, placement.stepId!)) >= placement.wipLimit) {
    // Refusals first, so a launch that could never start writes nothing (the locked check below stays the rule).
    const session = await tx.one<{ state: string }>('SELECT state FROM task_sessions WHERE id = ?', [target.sessionId]);
    if (!session || session.state !== 'prepared') return { refused: `session is ${session?.state ?? 'missing'}` };
    await enqueueLocked(tx, op.task_id, placement.stepId!);
    return { queued: placement.stepId! };
  }
  let inserted: Promise<number> | undefined;
  if (!row) {
    const id = globalThis.crypto.randomUUID();
    tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', id);
    // Sent with the session's lock below (one round trip, claim 8.2 before session 9).
    inserted = tx.exec(
      `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, state, generation, lifecycle_generation, idempotency_key, request_sha256, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'planned', 0, ?, ?, ?, ${tx.now}, ${tx.now})`,
      [
        id,
        op.id,
        op.task_id,
        target.sessionId,
        op.workspace_id,
        p.task.lifecycle_generation,
        idem,
        p.intent.request_sha256,
      ],
    );
    row = { id, state: 'planned', generation: 0 };
  }
  tx.lockRow(TIER.SESSION, 'task_sessions', target.sessionId);
  // The session's lock and the launch spec's read (a plain read) travel with the new claim's INSERT.
  const [, session, spec] = await Promise.all([
    inserted,
    tx.one<{ state: string }>('SELECT state FROM task_sessions WHERE id = ? FOR UPDATE', [target.sessionId]),
    tx.one<LaunchSpecRow>(LAUNCH_SPEC_SQL, [p.request.agent_profile_id, target.sessionId, op.task_id]),
  ]);
  if (!session || session.state !== 'prepared') return { refused: `session is ${session?.state ?? 'missing'}` };
  // The writes travel with COMMIT: the claim's compare-and-set is checked there (Tx.expect; its row is locked or
  // new, so it takes unless the ledger is corrupt), the session row is locked above, the task row by the prefix.
  tx.expect(
    {
      sql: `UPDATE task_launch_dispatch_claims SET state = 'running', generation = generation + 1, attempt = attempt + 1,
              lease_owner = ?, lease_expires_at = ${tx.nowPlusMs}, updated_at = ${tx.now}
        WHERE id = ? AND generation = ? AND state = ?`,
      params: [owner, leaseMs, row.id, Number(row.generation), row.state],
    },
    1,
    () => new ConflictError('stale_claim', 'dispatch claim changed while being claimed', { dispatch_id: row.id }),
  );
  void tx.commitWith([
    {
      sql: `UPDATE task_sessions SET state = 'starting', updated_at = ${tx.now} WHERE id = ?`,
      params: [target.sessionId],
    },
    ...(admit ? [admitStatement(tx, [op.task_id])] : []),
  ]);
  return {
    dispatchId: row.id,
    operationId: op.id,
    taskId: op.task_id,
    workspaceId: op.workspace_id,
    sessionId: target.sessionId,
    generation: Number(row.generation) + 1,
    owner,
    idempotencyKey: idem,
    request: p.request,
    requestSha256: p.intent.request_sha256,
    spec: spec ?? { executor_json: null, environment_id: null, worktree_path: null },
    verified: claimVerified(op, p.steps, p.intent),
  };
}

/** Why 5: the task only moves when a concurrent PATCH wins; twice in a row during one claim is already rare. */
const MAX_PLACEMENT_CHANGES = 5;

export async function claimLaunchDispatch(
  db: Db,
  target: { operationId: string; sessionId: string },
  owner: string,
  leaseMs: number,
  /** The claim generation the wake-up was sent for (0 before any claim); undefined accepts any. */
  expectedGeneration?: number,
): Promise<DispatchClaim | DispatchRefusal | DispatchQueued> {
  let known: Placement | undefined;
  for (let i = 0; i < MAX_PLACEMENT_CHANGES; i++) {
    const r = await runTransaction(db, 'ClaimLaunchDispatch', async (tx) => {
      const attempt = await claimOnceLocked(tx, target, owner, leaseMs, expectedGeneration, known);
      // A wrong placement writes nothing: the next attempt takes the right locks from the start.
      if ('moved' in attempt) tx.rollbackOnly();
      return attempt;
    });
    if (!('moved' in r)) return r;
    known = r.moved;
  }
  throw new TaskLedgerError('retry_exhausted', 'the task kept moving between workflow steps during its launch claim', {
    operation_id: target.operationId,
  });
}

/**
 * The compare-and-set every dispatch result goes through (running, same
 * generation and owner, lease alive by the database clock), sent without
 * waiting (`Tx.expect`): a stale claim changes nothing, rolls the
 * transaction back and throws `stale_claim`.
 */
export function casDispatchLocked(
  tx: Tx,
  claim: DispatchClaim,
  to: string,
  sets: string,
  params: (string | number | null)[],
) {
  tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', claim.dispatchId);
  tx.expect(
    {
      sql: `UPDATE task_launch_dispatch_claims SET state = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ${tx.now}${sets}
      WHERE id = ? AND state = 'running' AND generation = ? AND lease_owner = ? AND lease_expires_at > ${tx.now}`,
      params: [to, ...params, claim.dispatchId, claim.generation, claim.owner],
    },
    1,
    () => new ConflictError('stale_claim', 'dispatch claim is stale', { dispatch_id: claim.dispatchId }),
  );
}

/** The canonical evidence of a started runtime (recorded by the worker or reconciled by recovery). */
export function dispatchEvidenceJson(
  claim: { dispatchId: string; idempotencyKey: string; requestSha256: string },
  proof: Pick<RuntimeProof, 'handle' | 'startMarkerSha256'>,
): { json: string; sha256: string } {
  const json = canonicalJson({
    version: 1,
    dispatch_id: claim.dispatchId,
    idempotency_key: claim.idempotencyKey,
    request_sha256: claim.requestSha256,
    runtime_handle: proof.handle,
    start_marker_sha256: proof.startMarkerSha256,
  });
  return { json, sha256: domainHash(DISPATCH_EVIDENCE_DOMAIN, json) };
}

export async function failLaunchDispatch(
  db: Db,
  claim: DispatchClaim,
  failure: { class: 'no_dispatch' | 'ambiguous'; code: string; message: string },
): Promise<'retry_wait' | 'unknown'> {
  const to = failure.class === 'no_dispatch' ? 'retry_wait' : 'unknown';
  await runTransaction(db, 'FailLaunchDispatch', async (tx) => {
    await guardOperationLocked(tx, { kind: 'operation', operationId: claim.operationId, actor: claim.owner });
    casDispatchLocked(tx, claim, to, ', error_code = ?, error_json = ?', [
      failure.code.slice(0, 64),
      canonicalJson({ class: failure.class, code: failure.code, message: failure.message, owner: claim.owner }),
    ]);
    if (to === 'retry_wait') {
      tx.lockRow(TIER.SESSION, 'task_sessions', claim.sessionId);
      await tx.exec(
        `UPDATE task_sessions SET state = 'prepared', updated_at = ${tx.now} WHERE id = ? AND state = 'starting'`,
        [claim.sessionId],
      );
    }
  });
  return to;
}

/** The stored runtime handle of a succeeded dispatch (for reads and recovery). */
export function parseRuntimeHandle(text: string | null): Record<string, unknown> | null {
  return text === null ? null : (parseCanonical(text) as Record<string, unknown>);
}
