/**
 * Recovery of launch dispatch claims whose worker died (Store side; the
 * observation is I/O and happens before, outside any transaction).
 *
 * expireLaunchDispatchLeases — locks workspace 1 (share), the operation 4.2,
 * then its expired `running` dispatch claims 8.2 (ascending id): `running`
 * whose lease expired (database clock) -> `unknown`, never retried or
 * failed: only an observation may move it on. A lease renewed concurrently
 * is not expired (the UPDATE re-checks under the claim lock).
 *
 * reconcileLaunchDispatch (`reconcile_launch_dispatch`) — the LaunchTask lock
 * set (workspace 1, completed operation 4.2, task 5.2, identity 6, armed
 * intent 7, claim 8.2, session 9, runtime 10). Under those locks it rebuilds
 * the RecoverySnapshot with the caller's runtime proof and requires
 * `chooseRecoveryAction` to pick this action, the proof to carry the claim's
 * idempotency key, and the claim to still be `unknown` at the observed
 * generation with no deletion fence (compare-and-set). Then `unknown ->
 * succeeded` with the runtime handle and evidence, session `running` (or
 * `stopped` when the agent already exited), one `executors_running` row.
 *
 * retryLaunchDispatch (`retry_launch_dispatch`) — same locks up to the
 * session 9; the snapshot must choose this action from the authenticated
 * no-dispatch proof of this key and generation, observed on the host of the
 * claim's last owner (recorded in its error record at expiry). Then `unknown -> retry_wait`
 * with generation + 1 (any launch job or worker of an older generation is
 * stale), session `starting -> prepared`; the caller re-enqueues the launch
 * wake-up for the new generation.
 *
 * Any mismatch: a typed conflict, zero writes. No event is written.
 */
import { canonicalJson, parseCanonical } from '../canonical/canonical-json';
import { ConflictError, ValidationError } from '../domain/errors';
import type { CompensationState, DispatchState, OperationState, StepKind, StepState } from '../domain/vocab';
import { TIER } from '../db/lock-plan';
import { readRows, runTransaction, type Db, type Tx } from '../db/tx';
import { forceIndexSql } from '../db/dialect';
import { chooseRecoveryAction, type RecoverySnapshot } from '../runtime/recovery-action';
import { dispatchEvidenceJson, lockLaunchPrefixLocked, type RuntimeProof } from './launch-dispatch';
import { guardOperationLocked } from './operation-guard';

/** One dispatch claim recovery looks at, with the generation it was observed at. */
export interface DispatchTarget {
  dispatchId: string;
  operationId: string;
  taskId: string;
  sessionId: string;
  generation: number;
  idempotencyKey: string;
  /** The owner of the claim that went `unknown` (from its error record), or null when not recorded. */
  lastOwner: string | null;
}

/** Runtime proof from an executor observation (the marker's hash, the handle, liveness). */
export interface RuntimeObservation extends RuntimeProof {
  idempotencyKey: string;
  alive: boolean;
}

/** Authenticated no-dispatch proof from an executor observation. */
export interface NoDispatchProof {
  idempotency_key: string;
  generation: number;
  executor: string;
  /** The host whose markers and processes were inspected (the dead owner's host). */
  host: string;
  marker: 'absent' | 'refused';
  processes: 0;
}

interface ClaimRow {
  id: string;
  creation_operation_id: string;
  task_id: string;
  session_id: string;
  workspace_id: string;
  state: DispatchState;
  generation: number;
  idempotency_key: string;
  request_sha256: string;
  deletion_operation_id: string | null;
  error_json: string | null;
}

const CLAIM_COLUMNS =
  'id, creation_operation_id, task_id, session_id, workspace_id, state, generation, idempotency_key, request_sha256, deletion_operation_id, error_json';
/** CLAIM_COLUMNS qualified with the alias `c`, for the joins below. */
const CLAIM_COLUMNS_OF_C = CLAIM_COLUMNS.split(', ')
  .map((c) => `c.${c}`)
  .join(', ');

const nowSql = (db: Db) => (db.dialect === 'postgres' ? 'clock_timestamp()' : 'NOW(3)');
const scope = (workspaceId: string | undefined, column: string) =>
  workspaceId === undefined ? '' : `AND ${column} = ?`;
const scopeParams = (workspaceId: string | undefined) => (workspaceId === undefined ? [] : [workspaceId]);
const limitSql = (limit: number) => `LIMIT ${Math.max(1, Math.floor(limit))}`;

/** Operations with at least one `running` dispatch claim whose lease expired (plain read). */
export async function findExpiredDispatchOperations(db: Db, limit = 200, workspaceId?: string): Promise<string[]> {
  const rows = await readRows<{ creation_operation_id: string }>(
    db,
    `SELECT DISTINCT creation_operation_id FROM task_launch_dispatch_claims
      WHERE state = 'running' AND lease_expires_at < ${nowSql(db)} ${scope(workspaceId, 'workspace_id')}
      ${limitSql(limit)}`,
    scopeParams(workspaceId),
  );
  return rows.map((r) => r.creation_operation_id);
}

export async function expireLaunchDispatchLeases(db: Db, operationId: string, actor = 'reaper'): Promise<number> {
  return runTransaction(db, 'ExpireLaunchDispatchLeases', async (tx) => {
    // Workspace 1 and operation 4.2 serialize this with LaunchTask; the claims' states are re-checked below.
    await guardOperationLocked(tx, { kind: 'operation', operationId, actor });
    const expired = await tx.rows<{ id: string; lease_owner: string | null }>(
      `SELECT id, lease_owner FROM task_launch_dispatch_claims ${forceIndexSql(tx.dialect, 'uq_launch_dispatch')}
        WHERE creation_operation_id = ? AND state = 'running' AND lease_expires_at < ${tx.now}
        ORDER BY id FOR UPDATE`,
      [operationId],
    );
    let changed = 0;
    for (const { id, lease_owner } of expired.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
      tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', id);
      // The dead owner is kept: only the executor on its host can prove that nothing was started.
      changed += await tx.exec(
        `UPDATE task_launch_dispatch_claims SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL,
                error_code = 'lease_expired', error_json = ?, updated_at = ${tx.now}
          WHERE id = ? AND state = 'running' AND lease_expires_at < ${tx.now}`,
        [canonicalJson({ class: 'lease_expired', owner: lease_owner }), id],
      );
    }
    return changed;
  });
}

/** `unknown` claims of completed operations with no deletion fence (plain read). */
export async function findUnknownDispatches(db: Db, limit = 200, workspaceId?: string): Promise<DispatchTarget[]> {
  const rows = await readRows<ClaimRow>(
    db,
    `SELECT ${CLAIM_COLUMNS_OF_C} FROM task_launch_dispatch_claims c
       JOIN task_creation_operations o ON o.id = c.creation_operation_id
      WHERE c.state = 'unknown' AND c.deletion_operation_id IS NULL AND o.state = 'completed'
        ${scope(workspaceId, 'c.workspace_id')}
      ORDER BY c.updated_at ${limitSql(limit)}`,
    scopeParams(workspaceId),
  );
  return rows.map(toTarget);
}

/**
 * `retry_wait` claims of completed operations with no deletion fence and fewer than `maxAttempts`, of live tasks
 * not waiting in a WIP queue (a queued task's claim is retried once a slot admits it) (plain read).
 */
export async function findRetryableDispatches(
  db: Db,
  maxAttempts: number,
  limit = 200,
  workspaceId?: string,
): Promise<DispatchTarget[]> {
  const rows = await readRows<ClaimRow>(
    db,
    `SELECT ${CLAIM_COLUMNS_OF_C} FROM task_launch_dispatch_claims c
       JOIN task_creation_operations o ON o.id = c.creation_operation_id
       JOIN tasks t ON t.id = c.task_id AND t.lifecycle_state = 'live' AND t.queued_for_step_id IS NULL
      WHERE c.state = 'retry_wait' AND c.deletion_operation_id IS NULL AND o.state = 'completed' AND c.attempt < ?
        ${scope(workspaceId, 'c.workspace_id')}
      ORDER BY c.updated_at ${limitSql(limit)}`,
    [maxAttempts, ...scopeParams(workspaceId)],
  );
  return rows.map(toTarget);
}

/** `retry_wait` claims of completed operations that used up `maxAttempts` (plain read). */
export async function findExhaustedDispatches(
  db: Db,
  maxAttempts: number,
  limit = 200,
  workspaceId?: string,
): Promise<DispatchTarget[]> {
  const rows = await readRows<ClaimRow>(
    db,
    `SELECT ${CLAIM_COLUMNS_OF_C} FROM task_launch_dispatch_claims c
      WHERE c.state = 'retry_wait' AND c.deletion_operation_id IS NULL AND c.attempt >= ?
        ${scope(workspaceId, 'c.workspace_id')}
      ORDER BY c.updated_at ${limitSql(limit)}`,
    [maxAttempts, ...scopeParams(workspaceId)],
  );
  return rows.map(toTarget);
}

function toTarget(r: ClaimRow): DispatchTarget {
  return {
    dispatchId: r.id,
    operationId: r.creation_operation_id,
    taskId: r.task_id,
    sessionId: r.session_id,
    generation: Number(r.generation),
    idempotencyKey: r.idempotency_key,
    lastOwner: ownerOf(r.error_json),
  };
}

function ownerOf(errorJson: string | null): string | null {
  if (errorJson === null) return null;
  try {
    const owner = (parseCanonical(errorJson, { requireCanonical: false }) as { owner?: unknown }).owner;
    return typeof owner === 'string' ? owner : null;
  } catch {
    return null;
  }
}

function snapshotOf(
  operationState: OperationState,
  steps: { kind: StepKind; state: StepState; compensation_state: string }[],
  claim: Pick<ClaimRow, 'state' | 'deletion_operation_id'>,
  proof: 'runtime' | 'no_dispatch' | null,
): RecoverySnapshot {
  return {
    operationState,
    steps: steps.map((s) => ({
      kind: s.kind,
      state: s.state,
      compensationState: s.compensation_state as CompensationState,
    })),
    releaseUnfinished: false,
    phaseBCommitted: operationState === 'completed',
    dispatch: { state: claim.state, deletionFence: claim.deletion_operation_id !== null, proof },
  };
}

/**
 * The RecoverySnapshot of a dispatch's operation from plain reads, with the
 * given proof (recovery's first choice; the Store re-chooses under lock).
 */
export async function readDispatchSnapshot(
  db: Db,
  target: DispatchTarget,
  proof: 'runtime' | 'no_dispatch' | null,
): Promise<RecoverySnapshot | null> {
  const ops = await readRows<{ state: OperationState }>(db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
    target.operationId,
  ]);
  const claims = await readRows<ClaimRow>(db, `SELECT ${CLAIM_COLUMNS} FROM task_launch_dispatch_claims WHERE id = ?`, [
    target.dispatchId,
  ]);
  const steps = await readRows<{ kind: StepKind; state: StepState; compensation_state: string }>(
    db,
    'SELECT kind, state, compensation_state FROM task_creation_steps WHERE operation_id = ?',
    [target.operationId],
  );
  if (!ops[0] || !claims[0]) return null;
  return snapshotOf(ops[0].state, steps, claims[0], proof);
}

function validateTarget(target: DispatchTarget): void {
  if (!Number.isInteger(target.generation) || target.generation < 0) {
    throw new ValidationError('/generation', 'must be a non-negative integer');
  }
  for (const f of ['dispatchId', 'operationId', 'sessionId', 'idempotencyKey'] as const) {
    if (typeof target[f] !== 'string' || target[f].length === 0) throw new ValidationError(`/${f}`, 'is required');
  }
}

/**
 * The shared locked prefix of both recovery actions: LaunchTask locks up to
 * the claim, the snapshot choice, and the generation compare.
 */
async function lockForRecoveryLocked(
  tx: Tx,
  target: DispatchTarget,
  actor: string,
  proof: 'runtime' | 'no_dispatch',
  action: 'reconcile_launch_dispatch' | 'retry_launch_dispatch',
): Promise<ClaimRow> {
  const p = await lockLaunchPrefixLocked(tx, target.operationId, target.sessionId, actor);
  if ('refused' in p) {
    throw new ConflictError('creation_state_conflict', `${action} not legal: ${p.refused as string}`, {
      dispatch_id: target.dispatchId,
    });
  }
  tx.lockRow(TIER.DISPATCH_CLAIM, 'task_launch_dispatch_claims', target.dispatchId);
  const claim = await tx.one<ClaimRow>(
    `SELECT ${CLAIM_COLUMNS} FROM task_launch_dispatch_claims WHERE id = ? FOR UPDATE`,
    [target.dispatchId],
  );
  if (!claim || claim.creation_operation_id !== p.op.id || claim.session_id !== target.sessionId) {
    throw new ConflictError('creation_state_conflict', 'no such dispatch claim for this operation and session', {
      dispatch_id: target.dispatchId,
    });
  }
  const decision = chooseRecoveryAction(snapshotOf(p.op.state, p.steps, claim, proof));
  if (decision.action !== action) {
    throw new ConflictError('creation_state_conflict', `recovery chooses ${decision.action ?? 'nothing'}`, {
      dispatch_id: target.dispatchId,
      chosen: decision.action,
      detail: decision.action === null ? decision.detail : null,
    });
  }
  if (Number(claim.generation) !== target.generation) {
    throw new ConflictError('stale_claim', 'dispatch claim generation changed since it was observed', {
      dispatch_id: target.dispatchId,
      observed: target.generation,
      current: Number(claim.generation),
    });
  }
  if (claim.idempotency_key !== target.idempotencyKey) {
    throw new ConflictError('evidence_mismatch', 'proof is for another dispatch idempotency key', {
      dispatch_id: target.dispatchId,
    });
  }
  return claim;
}

/** The compare-and-set both actions write under: still `unknown`, same generation, no deletion fence. */
const CAS_FROM_UNKNOWN = "WHERE id = ? AND state = 'unknown' AND generation = ? AND deletion_operation_id IS NULL";

export async function reconcileLaunchDispatch(
  db: Db,
  target: DispatchTarget,
  runtime: RuntimeObservation,
  actor: string,
): Promise<void> {
  validateTarget(target);
  if (runtime.idempotencyKey !== target.idempotencyKey) {
    throw new ConflictError('evidence_mismatch', 'runtime proof is for another dispatch', {
      dispatch_id: target.dispatchId,
    });
  }
  if (!/^[0-9a-f]{64}$/.test(runtime.startMarkerSha256)) {
    throw new ValidationError('/startMarkerSha256', 'must be a lowercase SHA-256');
  }
  await runTransaction(db, 'ReconcileLaunchDispatch', async (tx) => {
    const claim = await lockForRecoveryLocked(tx, target, actor, 'runtime', 'reconcile_launch_dispatch');
    const evidence = dispatchEvidenceJson(
      { dispatchId: claim.id, idempotencyKey: claim.idempotency_key, requestSha256: claim.request_sha256 },
      runtime,
    );
    const changed = await tx.exec(
      `UPDATE task_launch_dispatch_claims SET state = 'succeeded', runtime_handle = ?, evidence_json = ?,
              evidence_sha256 = ?, error_code = NULL, error_json = NULL, updated_at = ${tx.now}
        ${CAS_FROM_UNKNOWN}`,
      [canonicalJson(runtime.handle), evidence.json, evidence.sha256, claim.id, target.generation],
    );
    if (changed !== 1) throw new ConflictError('stale_claim', 'dispatch claim changed', { dispatch_id: claim.id });
    tx.lockRow(TIER.SESSION, 'task_sessions', target.sessionId);
    await tx.exec(`UPDATE task_sessions SET state = ?, updated_at = ${tx.now} WHERE id = ?`, [
      runtime.alive ? 'running' : 'stopped',
      target.sessionId,
    ]);
    const existing = await tx.one<{ id: string }>('SELECT id FROM executors_running WHERE session_id = ?', [
      target.sessionId,
    ]);
    if (existing) {
      throw new ConflictError('creation_state_conflict', 'the session already has a recorded runtime', {
        dispatch_id: claim.id,
        runtime_id: existing.id,
      });
    }
    const runtimeId = globalThis.crypto.randomUUID();
    tx.lockRow(TIER.RUNTIME, 'executors_running', runtimeId);
    await tx.exec(
      `INSERT INTO executors_running (id, session_id, task_id, workspace_id, dispatch_claim_id, runtime_handle, pid, state, started_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${tx.now}, ${tx.now})`,
      [
        runtimeId,
        target.sessionId,
        claim.task_id,
        claim.workspace_id,
        claim.id,
        canonicalJson(runtime.handle),
        runtime.pid,
        runtime.alive ? 'running' : 'exited',
      ],
    );
  });
}

export async function retryLaunchDispatch(
  db: Db,
  target: DispatchTarget,
  proof: NoDispatchProof,
  actor: string,
): Promise<{ generation: number }> {
  validateTarget(target);
  if (proof.idempotency_key !== target.idempotencyKey || proof.generation !== target.generation) {
    throw new ConflictError('evidence_mismatch', 'no-dispatch proof is for another dispatch or generation', {
      dispatch_id: target.dispatchId,
    });
  }
  if (proof.processes !== 0 || (proof.marker !== 'absent' && proof.marker !== 'refused')) {
    throw new ValidationError('/proof', 'is not a no-dispatch proof');
  }
  if (typeof proof.host !== 'string' || proof.host.length === 0)
    throw new ValidationError('/proof/host', 'is required');
  return runTransaction(db, 'RetryLaunchDispatch', async (tx) => {
    const claim = await lockForRecoveryLocked(tx, target, actor, 'no_dispatch', 'retry_launch_dispatch');
    // Absence is local: it proves nothing unless observed on the host of the claim's last owner.
    if (!ownerOf(claim.error_json)?.startsWith(`${proof.host}:`)) {
      throw new ConflictError('evidence_mismatch', "no-dispatch proof was not observed on the last owner's host", {
        dispatch_id: claim.id,
        host: proof.host,
      });
    }
    const changed = await tx.exec(
      `UPDATE task_launch_dispatch_claims SET state = 'retry_wait', generation = generation + 1,
              error_code = 'no_dispatch_proven', error_json = ?, updated_at = ${tx.now}
        ${CAS_FROM_UNKNOWN}`,
      [canonicalJson({ class: 'no_dispatch', proof }), claim.id, target.generation],
    );
    if (changed !== 1) throw new ConflictError('stale_claim', 'dispatch claim changed', { dispatch_id: claim.id });
    tx.lockRow(TIER.SESSION, 'task_sessions', target.sessionId);
    await tx.exec(
      `UPDATE task_sessions SET state = 'prepared', updated_at = ${tx.now} WHERE id = ? AND state = 'starting'`,
      [target.sessionId],
    );
    return { generation: target.generation + 1 };
  });
}
