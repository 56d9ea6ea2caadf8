/**
 * One page of the ledger for `taskledger verify`: up to `limit` creation
 * operations after a cursor (by id), with their steps, outbox events, launch
 * dispatch claims, cleanup jobs, external-ID releases and task rows, all read from one snapshot
 * (db/snapshot.ts), so a fleet running meanwhile cannot make a half-written
 * creation look like drift.
 */
import { readSnapshot, type SnapshotReader } from '../db/snapshot';
import { bool, type Db } from '../db/tx';
import { normalizeOp, OP_COLUMNS, type OperationRow } from '../store/operation-guard';
import { normalizeStep, STEP_COLUMNS } from '../store/step-rows';
import type { StepRow } from '../store/types';

export type VerifyStepRow = StepRow & {
  compensation_evidence_json: string | null;
  compensation_evidence_sha256: string | null;
};

export interface EventRow {
  event_id: string;
  operation_id: string;
  task_id: string;
  revision: number;
  type: string;
  payload_json: string;
  payload_sha256: string;
  created_at: Date;
  delivered_at: Date | null;
  delivery_attempts: number | string;
}

export interface DispatchClaimRow {
  id: string;
  creation_operation_id: string;
  task_id: string;
  session_id: string;
  state: string;
  idempotency_key: string;
  request_sha256: string;
  runtime_handle: string | null;
  evidence_json: string | null;
  evidence_sha256: string | null;
  created_at: Date;
}

/** An external-ID release of the operation's task (store/release-claim.ts). */
export interface ReleaseRow {
  id: string;
  creation_operation_id: string;
  task_id: string;
  holder_state: string;
  state: string;
}

export interface CleanupJobRow {
  id: string;
  operation_id: string;
  kind: string;
  proof_json: string;
  proof_sha256: string;
}

export interface OperationRecord {
  op: OperationRow;
  /**
   * The task row, or null when Abort removed it; with whether it awaits its
   * blockers and their lifecycle states (null: the blocker row is gone).
   */
  task: {
    creation_state: string;
    lifecycle_state: string;
    external_id: string | null;
    awaits_blockers: boolean;
    blockers: (string | null)[];
  } | null;
  steps: VerifyStepRow[];
  events: EventRow[];
  claims: DispatchClaimRow[];
  cleanupJobs: CleanupJobRow[];
  releases: ReleaseRow[];
}

const placeholders = (n: number) => Array.from({ length: n }, () => '?').join(', ');

function byOperation<T>(rows: T[], key: (row: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const row of rows) {
    const k = key(row);
    const list = out.get(k);
    if (list) list.push(row);
    else out.set(k, [row]);
  }
  return out;
}

async function readChildren(read: SnapshotReader, ids: string[], taskIds: string[]) {
  const inOps = placeholders(ids.length);
  const [steps, events, claims, cleanupJobs, tasks, blockers, releases] = [
    await read<VerifyStepRow>(
      `SELECT ${STEP_COLUMNS}, compensation_evidence_json, compensation_evidence_sha256
         FROM task_creation_steps WHERE operation_id IN (${inOps}) ORDER BY id`,
      ids,
    ),
    await read<EventRow>(
      `SELECT event_id, operation_id, task_id, revision, type, payload_json, payload_sha256, created_at, delivered_at, delivery_attempts
         FROM event_outbox WHERE operation_id IN (${inOps}) ORDER BY seq`,
      ids,
    ),
    await read<DispatchClaimRow>(
      `SELECT id, creation_operation_id, task_id, session_id, state, idempotency_key, request_sha256, runtime_handle,
              evidence_json, evidence_sha256, created_at
         FROM task_launch_dispatch_claims WHERE creation_operation_id IN (${inOps}) ORDER BY id`,
      ids,
    ),
    await read<CleanupJobRow>(
      `SELECT id, operation_id, kind, proof_json, proof_sha256 FROM task_resource_cleanup_jobs
        WHERE operation_id IN (${inOps}) ORDER BY id`,
      ids,
    ),
    await read<{
      id: string;
      creation_state: string;
      lifecycle_state: string;
      external_id: string | null;
      awaits_blockers: unknown;
    }>(
      `SELECT id, creation_state, lifecycle_state, external_id, awaits_blockers FROM tasks WHERE id IN (${placeholders(taskIds.length)})`,
      taskIds,
    ),
    await read<{ task_id: string; lifecycle_state: string | null }>(
      `SELECT b.task_id, t.lifecycle_state FROM task_blockers b LEFT JOIN tasks t ON t.id = b.blocker_task_id
        WHERE b.task_id IN (${placeholders(taskIds.length)}) ORDER BY b.task_id, b.blocker_task_id`,
      taskIds,
    ),
    await read<ReleaseRow>(
      `SELECT id, creation_operation_id, task_id, holder_state, state FROM external_id_releases
        WHERE creation_operation_id IN (${inOps}) ORDER BY id`,
      ids,
    ),
  ];
  return { steps, events, claims, cleanupJobs, tasks, blockers, releases };
}

/** The page after `cursor` (exclusive), in id order; empty when there is none. */
export async function readLedgerPage(
  db: Db,
  page: { cursor: string | null; limit: number; workspaceId?: string },
): Promise<OperationRecord[]> {
  return readSnapshot(db, async (read) => {
    const where: string[] = [];
    const params: string[] = [];
    if (page.cursor !== null) {
      where.push('id > ?');
      params.push(page.cursor);
    }
    if (page.workspaceId) {
      where.push('workspace_id = ?');
      params.push(page.workspaceId);
    }
    const ops = (
      await read<OperationRow>(
        `SELECT ${OP_COLUMNS} FROM task_creation_operations ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
          ORDER BY id LIMIT ${Math.trunc(page.limit)}`,
        params,
      )
    ).map(normalizeOp);
    if (ops.length === 0) return [];
    const c = await readChildren(
      read,
      ops.map((o) => o.id),
      [...new Set(ops.map((o) => o.task_id))],
    );
    const steps = byOperation(c.steps.map(normalizeStep), (s) => s.operation_id);
    const events = byOperation(
      c.events.map((e) => ({ ...e, revision: Number(e.revision) })),
      (e) => e.operation_id,
    );
    const claims = byOperation(c.claims, (x) => x.creation_operation_id);
    const jobs = byOperation(c.cleanupJobs, (j) => j.operation_id);
    const releases = byOperation(c.releases, (r) => r.creation_operation_id);
    const blockersOf = byOperation(c.blockers, (b) => b.task_id);
    const tasks = new Map(
      c.tasks.map((t) => [
        t.id,
        {
          creation_state: t.creation_state,
          lifecycle_state: t.lifecycle_state,
          external_id: t.external_id,
          awaits_blockers: bool(t.awaits_blockers),
          blockers: (blockersOf.get(t.id) ?? []).map((b) => b.lifecycle_state),
        },
      ]),
    );
    return ops.map((op) => ({
      op,
      task: tasks.get(op.task_id) ?? null,
      steps: steps.get(op.id) ?? [],
      events: events.get(op.id) ?? [],
      claims: claims.get(op.id) ?? [],
      cleanupJobs: jobs.get(op.id) ?? [],
      releases: releases.get(op.id) ?? [],
    }));
  });
}
