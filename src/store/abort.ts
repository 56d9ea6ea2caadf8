/**
 * AbortTaskCreation: accepts only a ledger-eligible `preparing` operation.
 *
 * Locks workspace 1, operation 4.2, external-ID key 5.1, task 5.2, identity 6,
 * steps 7, cleanup jobs 8.1 (FOR SHARE), environments 11. The exact Abort
 * predicate: at least one step permanently `failed`; no step `unknown` or `running`; no launch intent `armed` (normal
 * Abort never cancels one); no compensation pending; every step's effect is
 * absent (never claimed, `retry_wait`/`failed` with absent proof) or
 * `compensated`/`transferred` (with its cleanup job present). Then, in this
 * one transaction: delete the partial live rows (task, task repositories,
 * operation-owned task environments), keep operation, steps and identity as
 * `aborted`, and write no lifecycle event. Aborting an aborted operation
 * replays; anything else ineligible is a typed conflict with zero writes.
 */
import { ConflictError } from '../domain/errors';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { guardOperationLocked, lockTaskChainLocked } from './operation-guard';
import { COMPENSATION_PENDING, lockStepsLocked, verifyStepRequest } from './step-rows';
import type { OperationAuthority, StepRow } from './types';

export interface AbortResult {
  operationId: string;
  cause: string;
  replayed: boolean;
  cleanupJobIds: string[];
}

/** Why each step blocks Abort, or null when its effect is accounted for. */
export function abortBlocker(step: StepRow): string | null {
  if (step.state === 'unknown' || step.state === 'running') return `step is ${step.state}`;
  if (step.state === 'armed') return 'launch intent is armed';
  if (COMPENSATION_PENDING.has(step.compensation_state)) return `compensation is ${step.compensation_state}`;
  if (
    step.state === 'succeeded' &&
    step.compensation_state !== 'compensated' &&
    step.compensation_state !== 'transferred'
  ) {
    return 'effect exists and was neither compensated nor transferred';
  }
  if (step.state === 'cancelled') return 'cancelled intents belong to workspace deletion';
  return null;
}

export async function abortTaskCreation(db: Db, auth: OperationAuthority, cause: string): Promise<AbortResult> {
  const trimmedCause = cause.slice(0, 64);
  return runTransaction(db, 'AbortTaskCreation', async (tx) => {
    const { op, plan, externalIdAbsent } = await guardOperationLocked(tx, auth, {
      externalIdKey: true,
      steps: true,
      ownTaskOnly: true,
    });
    if (op.state === 'aborted')
      return { operationId: op.id, cause: op.abort_cause ?? '', replayed: true, cleanupJobIds: [] };
    if (op.state !== 'preparing') {
      throw new ConflictError('creation_state_conflict', `operation is ${op.state}; only preparing operations abort`, {
        operation_id: op.id,
        state: op.state,
      });
    }
    await lockTaskChainLocked(tx, op, { externalIdKey: true, externalIdAbsent, steps: true });
    const steps = await lockStepsLocked(tx, op.id);
    const blockers = steps
      .map((s) => ({ step: s, why: abortBlocker(s) }))
      .filter((b): b is { step: StepRow; why: string } => b.why !== null);
    if (blockers.length > 0) {
      throw new ConflictError('creation_state_conflict', 'Abort predicate does not hold', {
        operation_id: op.id,
        blockers: blockers.map((b) => ({ kind: b.step.kind, step_key: b.step.step_key, why: b.why })),
      });
    }
    // The spec's Abort predicate needs a permanently failed step: the Store enforces it, not only the chooser.
    if (!steps.some((s) => s.state === 'failed')) {
      throw new ConflictError('creation_state_conflict', 'Abort needs a permanently failed step; none failed', {
        operation_id: op.id,
      });
    }
    for (const s of steps) verifyStepRequest(s, plan);

    // Tier 8.1: every transfer is fenced by its committed cleanup job.
    const jobIds = steps.filter((s) => s.compensation_state === 'transferred').map((s) => s.cleanup_job_id);
    if (jobIds.some((id) => id === null)) {
      throw new ConflictError('evidence_mismatch', 'a transferred step has no cleanup job', { operation_id: op.id });
    }
    const sortedJobs = (jobIds as string[]).sort();
    for (const id of sortedJobs) {
      tx.lockRow(TIER.CLEANUP, 'task_resource_cleanup_jobs', id);
      const job = await tx.one(
        `SELECT id FROM task_resource_cleanup_jobs WHERE id = ? AND operation_id = ? ${tx.forShare}`,
        [id, op.id],
      );
      if (!job)
        throw new ConflictError('evidence_mismatch', `cleanup job ${id} of a transfer is missing`, {
          operation_id: op.id,
        });
    }

    // Tier 11: operation-owned environments, then the partial live rows.
    const envs = await tx.rows<{ id: string }>(
      'SELECT id FROM task_environments WHERE task_id = ? AND operation_id = ? ORDER BY id',
      [op.task_id, op.id],
    );
    for (const e of envs) tx.lockRow(TIER.ENVIRONMENT, 'task_environments', e.id);
    await tx.exec('DELETE FROM task_environments WHERE task_id = ? AND operation_id = ?', [op.task_id, op.id]);
    await tx.exec('DELETE FROM task_repositories WHERE task_id = ?', [op.task_id]);
    await tx.exec('DELETE FROM tasks WHERE id = ? AND creation_operation_id = ?', [op.task_id, op.id]);
    await tx.exec(
      `UPDATE task_identities SET state = 'aborted', updated_at = ${tx.now} WHERE task_id = ? AND operation_id = ?`,
      [op.task_id, op.id],
    );
    const changed = await tx.exec(
      `UPDATE task_creation_operations SET state = 'aborted', abort_cause = ?, aborted_at = ${tx.now}, updated_at = ${tx.now}
        WHERE id = ? AND state = 'preparing'`,
      [trimmedCause, op.id],
    );
    if (changed !== 1)
      throw new ConflictError('stale_claim', 'operation changed while aborting', { operation_id: op.id });
    return { operationId: op.id, cause: trimmedCause, replayed: false, cleanupJobIds: sortedJobs };
  });
}
