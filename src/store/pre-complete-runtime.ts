/**
 * TransferPreCompleteRuntime: recovery found an agent runtime
 * (`executors_running`) for the session of a creation that has not completed
 * — something started an agent before `task.created`, which the protocol
 * never does. Per the spec ("pre-Complete runtime -> unknown and cleanup
 * transfer"), the runtime goes to a cleanup job that stops it and proves it
 * stopped (a `launch_dispatch` job, reason `pre_complete_runtime`,
 * src/cleanup/deleted-task.ts); the step stays `unknown` until the next
 * observation, after the job, can decide it.
 *
 * One transaction: workspace 1, operation 4.2 (the guard re-checks the
 * recovery claim when one is given; the operation must be `preparing`),
 * task 5.2, identity 6, steps 7, then the cleanup job 8.1. Idempotent: a
 * job of this reason for the task that is not done yet is returned, nothing
 * written. No runtime: nothing written. No event.
 */
import { randomUUID } from 'node:crypto';
import { parseCanonical } from '../canonical/canonical-json';
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { currentRowHash } from './effects/compensate-owned-rows';
import { txReader } from './effects/row-locks';
import { dispatchIdempotencyKey } from './launch-dispatch';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { lockStepsLocked } from './step-rows';
import { insertCleanupJobLocked } from './task-delete-locked';
import type { OperationAuthority } from './types';

export const PRE_COMPLETE_RUNTIME = 'pre_complete_runtime';

export async function transferPreCompleteRuntime(
  db: Db,
  auth: OperationAuthority,
  sessionId: string,
): Promise<{ jobId: string; created: boolean } | null> {
  return runTransaction(db, 'TransferPreCompleteRuntime', async (tx) => {
    const { op } = await guardOperationLocked(tx, auth, { externalIdKey: false, steps: true });
    if (op.state !== 'preparing') {
      throw new ConflictError('creation_state_conflict', `operation is ${op.state}`, { operation_id: op.id });
    }
    await lockTaskChainLocked(tx, op, { externalIdKey: false, steps: true });
    const steps = await lockStepsLocked(tx, op.id);
    const intent = steps.find((s) => s.kind === 'launch_intent' && s.step_key === sessionId);
    const runtimes = await tx.rows<{ id: string; runtime_handle: string }>(
      'SELECT id, runtime_handle FROM executors_running WHERE session_id = ? ORDER BY id',
      [sessionId],
    );
    if (runtimes.length === 0) return null;
    const [open] = await tx.rows<{ id: string }>(
      `SELECT id FROM task_resource_cleanup_jobs WHERE task_id = ? AND kind = 'launch_dispatch' AND reason = ?
          AND state <> 'done'`,
      [op.task_id, PRE_COMPLETE_RUNTIME],
    );
    if (open) return { jobId: open.id, created: false };
    const ownedRows = [];
    for (const r of runtimes) {
      const hash = await currentRowHash(txReader(tx), 'executors_running', r.id);
      if (hash !== null)
        ownedRows.push({ table: 'executors_running', key: r.id, row_sha256: hash, undone_sha256: null });
    }
    const handle = parseCanonical(runtimes[0]!.runtime_handle) as { host?: unknown };
    const stepId = intent?.id ?? steps.find((s) => s.kind === 'session_prepare')?.id ?? op.id;
    const jobId = randomUUID();
    tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', jobId);
    await insertCleanupJobLocked(tx, {
      id: jobId,
      op,
      reason: PRE_COMPLETE_RUNTIME,
      spec: {
        kind: 'launch_dispatch',
        stepId,
        proof: {
          version: 1,
          kind: 'launch_dispatch',
          operation_id: op.id,
          step_id: stepId,
          task_id: op.task_id,
          workspace_id: op.workspace_id,
          reason: PRE_COMPLETE_RUNTIME,
          owned_rows: ownedRows,
          detail: {
            dispatch_id: null,
            session_id: sessionId,
            idempotency_key: dispatchIdempotencyKey(op.id, sessionId),
            generation: 0,
            state: 'unknown',
            host: typeof handle.host === 'string' ? handle.host : null,
            lease_expires_at: null,
          },
        },
      },
    });
    return { jobId, created: true };
  });
}
