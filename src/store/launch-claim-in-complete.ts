/**
 * The launch's dispatch claim, taken by Complete's phase B (ADR 0019).
 *
 * A worker that starts the agent itself, right after its own phase B (it runs
 * the outbox and launch roles), names itself to phase B; phase B then writes,
 * with its COMMIT and after revision one and `task.created`, the claim
 * `claimLaunchDispatch` (store/launch-dispatch.ts) would otherwise take in a
 * transaction of its own: the dispatch claim inserted `running`, generation 1,
 * under this worker's lease; the session `prepared -> starting` (a
 * compare-and-set, `Tx.expect`); the task's WIP slot (`wip_admitted`), given in
 * the UPDATE that completes the task (`admitsTask`: one write of the task row,
 * not two); and the launch spec read. Nothing is started before that COMMIT:
 * the confirmation right before the start, the start and the record follow it
 * exactly as after a claim of its own, and a worker that dies in between leaves a `running` claim
 * whose lease runs out, which dispatch recovery observes as it does any other.
 *
 * Taken only where `claimLaunchDispatch` could answer nothing else: start
 * policy `immediate` and no resolution written by this phase; the workspace
 * active; the task live, in the workflow step the placement read (sent first in
 * the guard's round trip) found, and that step without a WIP limit (a limited
 * step's admission lock, tier 2, precedes the operation's: its launch claims as
 * before); the one launch intent `armed`, verified exact by this phase with no
 * dispatch claim, runtime or started session. Otherwise no claim is written and
 * the launch takes its own.
 *
 * Locks: none new. The verification took the claim's key (8.2), the session (9)
 * and its runtime (10), shared and in order; the writes here only re-acquire
 * the first two (`lockRow` must answer `held`, or this throws before writing).
 */
import type { CreationPlan, LaunchIntentRequest } from '../canonical/types';
import type { Statement } from '../db/batch';
import { TIER } from '../db/lock-plan';
import type { Tx } from '../db/tx';
import { ConflictError } from '../domain/errors';
import {
  dispatchIdempotencyKey,
  LAUNCH_SPEC_SQL,
  type DispatchClaim,
  type LaunchSpecRow,
  type Placement,
} from './launch-dispatch';
import type { OperationRow, TaskLockRow } from './operation-guard';
import { verifyStepRequest } from './step-rows';
import type { StepRow } from './types';
import { claimVerified } from './claim-verified';

/** The worker that will start the agent: the claim's lease owner. */
export interface LaunchClaimant {
  owner: string;
  leaseMs: number;
}

/** What phase B verified (`VerifiedCreation`, store/complete.ts). */
interface Verified {
  op: OperationRow;
  plan: CreationPlan;
  task: TaskLockRow;
  resolves: boolean;
}

/** What phase B saw under its locks besides. */
export interface ClaimContext {
  steps: readonly StepRow[];
  workspaceState: string;
  placement: Placement;
}

export interface ClaimInComplete {
  /** Sent with phase B's COMMIT, after its own writes; the last is the launch spec's read. */
  statements: Statement[];
  /** The task holds no WIP slot yet: phase B's completion of the task row takes it (`admitAssignments`). */
  admitsTask: boolean;
  /** The claim as committed, given the spec's row. */
  claimOf(spec: LaunchSpecRow | undefined): DispatchClaim;
}

export function claimInCompleteLocked(
  tx: Tx,
  v: Verified,
  ctx: ClaimContext,
  who: LaunchClaimant,
): ClaimInComplete | null {
  const intents = ctx.steps.filter((s) => s.kind === 'launch_intent');
  const intent = intents[0];
  if (v.plan.start_policy !== 'immediate' || v.resolves || intents.length !== 1 || intent?.state !== 'armed') {
    return null;
  }
  if (ctx.workspaceState !== 'active' || v.task.lifecycle_state !== 'live') return null;
  const { placement } = ctx;
  if (placement.limited || placement.stepId !== v.task.workflow_step_id) return null;
  const request = verifyStepRequest(intent, v.plan) as LaunchIntentRequest;
  const sessionId = intent.step_key;
  const claimKey = `${v.op.id}:${v.task.id}:${sessionId}`;
  if (
    tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', claimKey) !== 'held' ||
    tx.lockRow(TIER.SESSION, 'task_sessions', sessionId) !== 'held'
  ) {
    throw new Error('internal: the launch claim in Complete needs the locks its verification takes');
  }
  const dispatchId = globalThis.crypto.randomUUID();
  const idem = dispatchIdempotencyKey(v.op.id, sessionId);
  // The verification read the session `prepared` under its shared lock; the compare-and-set makes it the rule.
  tx.expect(
    {
      sql: `UPDATE task_sessions SET state = 'starting', updated_at = ${tx.now} WHERE id = ? AND state = 'prepared'`,
      params: [sessionId],
    },
    1,
    () =>
      new ConflictError('stale_claim', 'the session left prepared before its launch claim', { session_id: sessionId }),
  );
  const statements: Statement[] = [
    {
      sql: `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, state,
              generation, attempt, lease_owner, lease_expires_at, lifecycle_generation, idempotency_key, request_sha256,
              created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'running', 1, 1, ?, ${tx.nowPlusMs}, ?, ?, ?, ${tx.now}, ${tx.now})`,
      params: [
        dispatchId,
        v.op.id,
        v.task.id,
        sessionId,
        v.op.workspace_id,
        who.owner,
        who.leaseMs,
        v.task.lifecycle_generation,
        idem,
        intent.request_sha256,
      ],
    },
    { sql: LAUNCH_SPEC_SQL, params: [request.agent_profile_id, sessionId, v.task.id] },
  ];
  return {
    statements,
    admitsTask: !v.task.wip_admitted,
    claimOf: (spec) => ({
      dispatchId,
      operationId: v.op.id,
      taskId: v.task.id,
      workspaceId: v.op.workspace_id,
      sessionId,
      generation: 1,
      owner: who.owner,
      idempotencyKey: idem,
      request,
      requestSha256: intent.request_sha256,
      spec: spec ?? { executor_json: null, environment_id: null, worktree_path: null },
      verified: claimVerified(v.op, ctx.steps, intent),
    }),
  };
}
