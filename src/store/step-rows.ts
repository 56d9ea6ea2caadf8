/**
 * Shared, lock-holding helpers for step rows (tier 7). None of them begins a
 * transaction or takes a lock below tier 7.
 */
import { parseCanonical, sameJson } from '../canonical/canonical-json';
import { canonicalTextHash, idempotencyKey, STEP_REQUEST_DOMAIN } from '../canonical/hash';
import type { CreationPlan, PlanStep, StepRequest } from '../canonical/types';
import { validateStepRequest } from '../canonical/validate';
import { ConflictError, TaskLedgerError } from '../domain/errors';
import type { StepKind } from '../domain/vocab';
import { promotedSteps } from '../plan/session-launch';
import { TIER } from '../db/lock-plan';
import type { Statement } from '../db/batch';
import type { Tx } from '../db/tx';
import { forceIndexSql } from '../db/dialect';
import type { Dialect } from '../db/config';
import { VerifiedMemo } from './binding-cache';
import type { StepRow } from './types';

export const STEP_COLUMNS =
  'id, operation_id, task_id, workspace_id, kind, step_key, request_json, request_sha256, idempotency_key, state, generation, attempt, lease_owner, lease_expires_at, evidence_json, evidence_sha256, compensation_state, compensation_generation, compensation_lease_owner, compensation_lease_expires_at, cleanup_job_id, disposition';

export interface StepRef {
  kind: StepKind;
  stepKey: string;
}

/** Driver values to their types (counters as numbers). */
export function normalizeStep<T extends StepRow>(row: T): T {
  return {
    ...row,
    generation: Number(row.generation),
    attempt: Number(row.attempt),
    compensation_generation: Number(row.compensation_generation),
  };
}

/**
 * The statement that locks every step of an operation (sent ahead by the operation guard). PostgreSQL locks the rows
 * as they leave the sort, so `ORDER BY id` takes them in id order. InnoDB locks each row as the key read reaches it,
 * before any sort, so MySQL/MariaDB take them in the key's order whatever the statement says (every transaction
 * locks an operation's steps through this statement or its id-only fence below, by the same key, so they all take
 * them in that one order); there the sort bought only a filesort of the rows' documents per call, and the rows are
 * put in id order below instead (ADR 0042).
 */
export function stepsLockStatement(operationId: string, dialect: Dialect, columns = STEP_COLUMNS): Statement {
  return {
    sql: `SELECT ${columns} FROM task_creation_steps ${forceIndexSql(dialect, 'uq_task_creation_steps_key')} WHERE operation_id = ?${dialect === 'postgres' ? ' ORDER BY id' : ''} FOR UPDATE`,
    params: [operationId],
  };
}

/**
 * The same locks as `stepsLockStatement`, reading only the ids: for a fence that counts the rows (`Tx.expect`),
 * which needs none of their documents (MySQL would send them all to be discarded).
 */
export function stepsLockFence(operationId: string, dialect: Dialect): Statement {
  return stepsLockStatement(operationId, dialect, 'id');
}

/** Locks every step of the operation, in ascending id order (tier 7). */
export async function lockStepsLocked(tx: Tx, operationId: string): Promise<StepRow[]> {
  // One statement (see above for the order the server takes the row locks in); the lock plan records the
  // acquisitions in id order right after (an out-of-order call still throws and rolls back with zero writes).
  const { sql, params } = stepsLockStatement(operationId, tx.dialect);
  const rows = await tx.rows<StepRow>(sql, [...params]);
  const sorted = rows.map(normalizeStep).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  for (const s of sorted) tx.lockRow(TIER.STEP, 'task_creation_steps', s.id);
  return sorted;
}

export function findStep(steps: StepRow[], ref: StepRef): StepRow {
  const step = steps.find((s) => s.kind === ref.kind && s.step_key === ref.stepKey);
  if (!step) {
    throw new TaskLedgerError('not_found', `no ${ref.kind} step with key ${ref.stepKey} in this operation`, {
      kind: ref.kind,
      step_key: ref.stepKey,
    });
  }
  return step;
}

export function findStepById(steps: StepRow[], stepId: string): StepRow {
  const step = steps.find((s) => s.id === stepId);
  if (!step)
    throw new TaskLedgerError('not_found', `step ${stepId} is not part of this operation`, { step_id: stepId });
  return step;
}

/**
 * Re-derives a step's request from its stored bytes and from the verified
 * plan: schema, request hash, plan entry and idempotency key must all agree.
 */
export function verifyStepRequest(step: StepRow, plan: CreationPlan): StepRequest {
  // Memoised on every input (binding-cache.ts); `plan` is the memoised, frozen plan, so identity is exact.
  return requestMemo.get(
    step.id,
    [plan, step.kind, step.step_key, step.operation_id, step.request_json, step.request_sha256, step.idempotency_key],
    () => deriveStepRequest(step, plan),
  );
}

const requestMemo = new VerifiedMemo<StepRequest>();

/**
 * A stored step's request, parsed from its bytes (which must be its RFC 8785 form) and validated against its kind's
 * closed schema. Memoised per step on the kind and the stored text (ADR 0050): a batch, both phases of Complete and
 * the launch read one step's request about ten times per creation; the same bytes always give the same request.
 */
export function parsedStepRequest(step: StepRow): StepRequest {
  return parsedRequests.get(step.id, [step.kind, step.request_json], () =>
    validateStepRequest(step.kind, parseCanonical(step.request_json)),
  );
}

const parsedRequests = new VerifiedMemo<StepRequest>();

function deriveStepRequest(step: StepRow, plan: CreationPlan): StepRequest {
  const mismatch = (why: string): ConflictError =>
    new ConflictError('evidence_mismatch', `step ${step.kind}/${step.step_key}: ${why}`, { step_id: step.id });
  let request: StepRequest;
  try {
    request = parsedStepRequest(step);
  } catch (err) {
    throw mismatch(`stored request is invalid (${(err as Error).message})`);
  }
  // The stored text was just accepted as the request's RFC 8785 form (parseCanonical): it hashes as the request.
  const sha = canonicalTextHash(STEP_REQUEST_DOMAIN, step.request_json);
  if (sha !== step.request_sha256) throw mismatch('stored request does not hash to request_sha256');
  const same = (s: PlanStep): boolean => s.kind === step.kind && s.step_key === step.step_key;
  // A deferred plan's promoted pair derives from the plan as exactly as its own steps do (plan/session-launch.ts).
  const planned = plan.steps.find(same) ?? promotedSteps(plan).find(same);
  if (!planned || !sameJson(planned.request, request)) {
    throw mismatch('stored request differs from the manifest');
  }
  if (idempotencyKey(step.operation_id, step.kind, step.step_key, sha) !== step.idempotency_key) {
    throw mismatch('idempotency key does not match the request');
  }
  return request;
}

/**
 * Every plan step has exactly one row, and no row is outside the plan. With
 * `promoted` (a completed creation, whose deferred start may have been
 * promoted), the plan's promoted pair may also be there, both or neither.
 */
export function verifyStepSet(steps: StepRow[], plan: CreationPlan, promoted = false): void {
  const key = (s: { kind: string; step_key: string }): string => `${s.kind}\u0000${s.step_key}`;
  const stored = new Set(steps.map(key));
  const matches = (expected: PlanStep[]): boolean =>
    expected.length === stored.size && expected.every((s) => stored.has(key(s)));
  if (matches(plan.steps)) return;
  const pair = promoted ? promotedSteps(plan) : [];
  if (pair.length > 0 && matches([...plan.steps, ...pair])) return;
  throw new ConflictError('evidence_mismatch', 'step rows do not match the manifest', {});
}

export const COMPENSATION_PENDING = new Set(['required', 'running', 'retry_wait', 'unknown']);

/** PreLaunchArmPredicate minus the intent itself: every non-launch step succeeded, nothing to compensate. */
export function nonLaunchStepsReady(steps: StepRow[]): boolean {
  return steps.every(
    (s) => (s.kind === 'launch_intent' || s.state === 'succeeded') && !COMPENSATION_PENDING.has(s.compensation_state),
  );
}

/**
 * After a permanent failure, every effect that exists must be undone: mark
 * succeeded steps' compensation `required` (same transaction as the failure
 * or the late success that found the operation winding down).
 */
export async function requireCompensationLocked(tx: Tx, steps: StepRow[]): Promise<number> {
  const ids = steps.filter((s) => s.state === 'succeeded' && s.compensation_state === 'none').map((s) => s.id);
  if (ids.length === 0) return 0;
  return tx.exec(
    `UPDATE task_creation_steps SET compensation_state = 'required', updated_at = ${tx.now}
      WHERE id IN (${ids.map(() => '?').join(', ')}) AND compensation_state = 'none'`,
    ids,
  );
}
