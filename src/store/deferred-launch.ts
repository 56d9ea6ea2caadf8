/**
 * PromoteDeferredLaunch: a `deferred` creation's start-when-unblocked intent
 * (`plan.deferred_launch`) becomes its session/launch pair — the spec's
 * "atomically materializing exactly one session/launch pair under the same
 * task/admission fence", once its `task.dependencies_resolved` event exists
 * (`store/task-done.ts`). The event's delivery calls this, then launches the
 * armed intent exactly as for an immediate start (`outbox/dispatcher.ts`).
 *
 * One transaction. Locks, in order: workspace 1 (share), the creation
 * operation 4.2, task 5.2, identity 6, steps 7, then the session's rows
 * (session 9, runtime 10, task environment 11.1, resource markers 14).
 * Requires: an active workspace; the operation `completed`; a `deferred` plan with a deferred
 * launch; the task `live`; its `task.dependencies_resolved` event committed.
 * Writes: a `session_prepare` step `succeeded` and a `launch_intent` step
 * `armed` — requests, request hashes and idempotency keys exactly those
 * `plan/session-launch.ts` derives from the stored plan, generation and
 * attempt 1, the same evidence a step worker records — plus the prepared
 * session row and its resource marker (only onto a clean slate). Already
 * promoted: nothing written. Not legal: `{refused}`, nothing written. No
 * event: the dependencies_resolved event is the announcement.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../canonical/canonical-json';
import { evidenceHash, idempotencyKey, stepRequestHash } from '../canonical/hash';
import type { StepEvidence } from '../canonical/types';
import { runTransaction, type Db } from '../db/tx';
import { promotedSteps } from '../plan/session-launch';
import { armedIntentEvidence } from '../kinds/launch-intent/ledger';
import { materializeSessionLocked, sessionPrepareEvidence } from '../kinds/session-prepare/ledger';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { lockStepsLocked, verifyStepSet } from './step-rows';
import type { StepClaim } from './types';

export type PromotionResult = { promoted: boolean; sessionId: string } | { refused: string };

export async function promoteDeferredLaunch(db: Db, operationId: string, actor: string): Promise<PromotionResult> {
  return runTransaction(db, 'PromoteDeferredLaunch', async (tx) => {
    const { op, plan, workspaceState } = await guardOperationLocked(
      tx,
      { kind: 'operation', operationId, actor },
      { externalIdKey: false, steps: true },
    );
    if (workspaceState !== 'active') return { refused: `workspace is ${workspaceState}` };
    if (op.state !== 'completed') return { refused: `operation is ${op.state}, not completed` };
    const pair = promotedSteps(plan);
    if (pair.length === 0) return { refused: `start policy ${plan.start_policy} has no deferred launch` };
    const sessionId = pair[0]!.step_key;
    const { task } = await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
    if (!task || task.lifecycle_state !== 'live') return { refused: `task is ${task?.lifecycle_state ?? 'gone'}` };
    const fence = await tx.one(
      "SELECT event_id FROM event_outbox WHERE task_id = ? AND type = 'task.dependencies_resolved'",
      [op.task_id],
    );
    if (!fence) return { refused: 'its dependencies are not resolved' };
    const steps = await lockStepsLocked(tx, op.id);
    verifyStepSet(steps, plan, true);
    if (steps.length > plan.steps.length) return { promoted: false, sessionId };

    const claims: StepClaim[] = pair.map((p) => {
      const requestSha256 = stepRequestHash(p.request);
      return {
        operationId: op.id,
        stepId: randomUUID(),
        kind: p.kind,
        stepKey: p.step_key,
        generation: 1,
        owner: actor,
        leaseExpiresAt: new Date(0),
        request: p.request,
        requestSha256,
        idempotencyKey: idempotencyKey(op.id, p.kind, p.step_key, requestSha256),
      };
    });
    const evidenceOf = (c: StepClaim): StepEvidence =>
      c.kind === 'session_prepare' ? sessionPrepareEvidence(c) : armedIntentEvidence(c);
    // New rows of this operation, whose row (4.2) this transaction holds: no concurrent promotion can insert them.
    for (const c of claims) {
      const evidence = evidenceOf(c);
      await tx.exec(
        `INSERT INTO task_creation_steps (id, operation_id, task_id, workspace_id, kind, step_key, request_json, request_sha256,
                                          idempotency_key, state, generation, attempt, evidence_json, evidence_sha256, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ${tx.now}, ${tx.now})`,
        [
          c.stepId,
          op.id,
          op.task_id,
          op.workspace_id,
          c.kind,
          c.stepKey,
          canonicalJson(c.request),
          c.requestSha256,
          c.idempotencyKey,
          c.kind === 'launch_intent' ? 'armed' : 'succeeded',
          canonicalJson(evidence),
          evidenceHash(evidence),
        ],
      );
    }
    await materializeSessionLocked(
      tx,
      claims.find((c) => c.kind === 'session_prepare')!,
    );
    return { promoted: true, sessionId };
  });
}
