/**
 * Read models for creation operations (plain autocommit reads): one
 * operation's full timeline (with its external-ID release, if any), and a
 * keyset-paginated list, newest first.
 * Stored documents are parsed for display only (never hashed here). The
 * completion token's hash is never selected, so it cannot leak.
 */
import { parseCanonical } from '../canonical/canonical-json';
import { ValidationError } from '../domain/errors';
import { bool, readRows, type Db, type SqlParam } from '../db/tx';

const OPERATION_COLUMNS = [
  'id',
  'workspace_id',
  'task_id',
  'state',
  'start_policy',
  'plan_json',
  'manifest_hash',
  'actor_json',
  'actor_binding_hash',
  'generation',
  'lease_owner',
  'lease_expires_at',
  'recovery_action',
  'recovery_generation',
  'recovery_owner',
  'recovery_lease_expires_at',
  'recovery_actor_binding_hash',
  'release_operation_id',
  'release_generation',
  'release_applied',
  'result_outcome',
  'result_revision',
  'result_event_id',
  'abort_cause',
  'error_code',
  'error_json',
  'created_at',
  'updated_at',
  'completing_at',
  'completed_at',
  'aborted_at',
].join(', ');

const STEP_COLUMNS = [
  'id',
  'kind',
  'step_key',
  'state',
  'generation',
  'attempt',
  'lease_owner',
  'lease_expires_at',
  'next_attempt_at',
  'request_json',
  'request_sha256',
  'idempotency_key',
  'evidence_json',
  'evidence_sha256',
  'provider_handle',
  'disposition',
  'compensation_state',
  'compensation_generation',
  'compensation_evidence_json',
  'cleanup_job_id',
  'error_code',
  'error_json',
  'created_at',
  'updated_at',
].join(', ');

type Row = Record<string, unknown>;

/** A stored document for display; a corrupt one is shown raw instead of failing the read. */
function doc(value: unknown): unknown {
  if (typeof value !== 'string') return null;
  try {
    return parseCanonical(value);
  } catch {
    return { unparsable_document: value };
  }
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

function errorOf(code: unknown, json: unknown): { code: unknown; detail: unknown } | null {
  return code === null && json === null ? null : { code, detail: doc(json) };
}

function stepView(s: Row): Row {
  return {
    id: s.id,
    kind: s.kind,
    step_key: s.step_key,
    state: s.state,
    generation: num(s.generation),
    attempt: num(s.attempt),
    lease_owner: s.lease_owner,
    lease_expires_at: s.lease_expires_at,
    next_attempt_at: s.next_attempt_at,
    request: doc(s.request_json),
    request_sha256: s.request_sha256,
    idempotency_key: s.idempotency_key,
    evidence: doc(s.evidence_json),
    evidence_sha256: s.evidence_sha256,
    provider_handle: s.provider_handle,
    disposition: s.disposition,
    compensation_state: s.compensation_state,
    compensation_generation: num(s.compensation_generation),
    compensation_evidence: doc(s.compensation_evidence_json),
    cleanup_job_id: s.cleanup_job_id,
    error: errorOf(s.error_code, s.error_json),
    created_at: s.created_at,
    updated_at: s.updated_at,
  };
}

/** One operation with every step, or null. */
export async function readOperation(db: Db, operationId: string): Promise<Row | null> {
  const ops = await readRows<Row>(db, `SELECT ${OPERATION_COLUMNS} FROM task_creation_operations WHERE id = ?`, [
    operationId,
  ]);
  const op = ops[0];
  if (!op) return null;
  const steps = await readRows<Row>(
    db,
    `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE operation_id = ? ORDER BY kind, step_key`,
    [operationId],
  );
  // A task's ID is released at most once (nothing sets it again), so one release row at most; newest first regardless.
  const releases = await readRows<Row>(
    db,
    `SELECT id, state, holder_state, requested_by, requested_at, completed_at FROM external_id_releases
      WHERE creation_operation_id = ? ORDER BY requested_at DESC, id DESC`,
    [operationId],
  );
  const rel = releases[0];
  return {
    id: op.id,
    workspace_id: op.workspace_id,
    task_id: op.task_id,
    state: op.state,
    start_policy: op.start_policy,
    plan: doc(op.plan_json),
    manifest_hash: op.manifest_hash,
    actor: doc(op.actor_json),
    actor_binding_hash: op.actor_binding_hash,
    generation: num(op.generation),
    lease_owner: op.lease_owner,
    lease_expires_at: op.lease_expires_at,
    recovery: {
      action: op.recovery_action,
      generation: num(op.recovery_generation),
      owner: op.recovery_owner,
      lease_expires_at: op.recovery_lease_expires_at,
      actor_binding_hash: op.recovery_actor_binding_hash,
    },
    // The recorded external-ID release of this creation's task (null fields when none), then the creation's own
    // release columns: the claim fence (set when the release claimed a preparing creation) and `applied`.
    release: {
      id: rel?.id ?? null,
      state: rel?.state ?? null,
      holder_state: rel?.holder_state ?? null,
      requested_by: rel?.requested_by ?? null,
      requested_at: rel?.requested_at ?? null,
      completed_at: rel?.completed_at ?? null,
      operation_id: op.release_operation_id,
      generation: num(op.release_generation),
      applied: bool(op.release_applied),
    },
    result: { outcome: op.result_outcome, revision: num(op.result_revision), event_id: op.result_event_id },
    abort_cause: op.abort_cause,
    error: errorOf(op.error_code, op.error_json),
    created_at: op.created_at,
    updated_at: op.updated_at,
    completing_at: op.completing_at,
    completed_at: op.completed_at,
    aborted_at: op.aborted_at,
    steps: steps.map(stepView),
  };
}

export interface ListFilter {
  state?: string;
  workspaceId?: string;
  limit: number;
  cursor?: string;
}

interface CursorKey {
  createdAt: Date;
  id: string;
}

/** Opaque to callers: base64url of `[created_at ISO, id]` of the last row of the page. */
export function encodeCursor(createdAt: Date, id: string): string {
  return Buffer.from(JSON.stringify([createdAt.toISOString(), id]), 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): CursorKey {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (
      Array.isArray(parsed) &&
      parsed.length === 2 &&
      typeof parsed[0] === 'string' &&
      typeof parsed[1] === 'string'
    ) {
      const createdAt = new Date(parsed[0]);
      if (!Number.isNaN(createdAt.getTime()) && /^[0-9a-f-]{36}$/.test(parsed[1])) return { createdAt, id: parsed[1] };
    }
  } catch {
    // fall through
  }
  throw new ValidationError('/cursor', 'is not a cursor this API returned');
}

const LIST_COLUMNS =
  'id, workspace_id, task_id, state, start_policy, result_outcome, abort_cause, created_at, updated_at, completed_at, aborted_at';

export async function listOperations(
  db: Db,
  filter: ListFilter,
): Promise<{ operations: Row[]; next_cursor: string | null }> {
  const where: string[] = [];
  const params: SqlParam[] = [];
  if (filter.state !== undefined) {
    where.push('state = ?');
    params.push(filter.state);
  }
  if (filter.workspaceId !== undefined) {
    where.push('workspace_id = ?');
    params.push(filter.workspaceId);
  }
  if (filter.cursor !== undefined) {
    const key = decodeCursor(filter.cursor);
    where.push('(created_at < ? OR (created_at = ? AND id < ?))');
    params.push(key.createdAt, key.createdAt, key.id);
  }
  const rows = await readRows<Row>(
    db,
    `SELECT ${LIST_COLUMNS} FROM task_creation_operations ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY created_at DESC, id DESC LIMIT ?`,
    [...params, filter.limit + 1],
  );
  const page = rows.slice(0, filter.limit);
  const last = page[page.length - 1];
  const next = rows.length > filter.limit && last ? encodeCursor(last.created_at as Date, String(last.id)) : null;
  return { operations: page, next_cursor: next };
}
