/**
 * The ledger sweep that makes Redis disposable: every non-terminal operation
 * gets its due wake-ups again (job IDs collapse duplicates), and completed
 * workspaces with undelivered outbox events get a dispatcher wake-up. Plain
 * reads only; the full reaper (lease expiry, RecoveryAction) builds on this.
 */
import { OUTBOX_QUEUE, type OutboxJob } from '../../queues/names';
import { readRows, type Db } from '../db/tx';
import { enqueueRunnable } from '../coordinator/enqueue';
import type { QueueSet } from '../coordinator/queues';

/** Why 500: one sweep's worth of work stays a bounded burst of enqueues. */
const SWEEP_LIMIT = 500;

export interface SweepResult {
  operations: number;
  outboxWorkspaces: number;
}

export async function sweepWakeups(db: Db, queues: QueueSet, workspaceId?: string): Promise<SweepResult> {
  const scope = workspaceId === undefined ? '' : 'AND workspace_id = ?';
  const scopeParams = workspaceId === undefined ? [] : [workspaceId];
  const ops = await readRows<{ id: string }>(
    db,
    `SELECT id FROM task_creation_operations WHERE state IN ('preparing', 'completing') ${scope} ORDER BY updated_at LIMIT ${SWEEP_LIMIT}`,
    scopeParams,
  );
  for (const op of ops) await enqueueRunnable(db, queues, op.id);
  const pending = await readRows<{ workspace_id: string }>(
    db,
    `SELECT DISTINCT workspace_id FROM event_outbox WHERE delivered_at IS NULL ${scope} LIMIT ${SWEEP_LIMIT}`,
    scopeParams,
  );
  for (const w of pending) {
    await queues.get(OUTBOX_QUEUE).add('dispatch', { workspaceId: w.workspace_id } satisfies OutboxJob, {
      jobId: `outbox-${w.workspace_id}-sweep-${Date.now()}`,
    });
  }
  return { operations: ops.length, outboxWorkspaces: pending.length };
}
