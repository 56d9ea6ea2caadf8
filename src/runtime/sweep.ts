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

export async function sweepWakeups(db: Db, queues: QueueSet): Promise<SweepResult> {
  const ops = await readRows<{ id: string }>(
    db,
    `SELECT id FROM task_creation_operations WHERE state IN ('preparing', 'completing') ORDER BY updated_at LIMIT ${SWEEP_LIMIT}`,
  );
  for (const op of ops) await enqueueRunnable(db, queues, op.id);
  const pending = await readRows<{ workspace_id: string }>(
    db,
    `SELECT DISTINCT workspace_id FROM event_outbox WHERE delivered_at IS NULL LIMIT ${SWEEP_LIMIT}`,
  );
  for (const w of pending) {
    await queues.get(OUTBOX_QUEUE).add('dispatch', { workspaceId: w.workspace_id } satisfies OutboxJob, {
      jobId: `outbox-${w.workspace_id}-sweep-${Date.now()}`,
    });
  }
  return { operations: ops.length, outboxWorkspaces: pending.length };
}
