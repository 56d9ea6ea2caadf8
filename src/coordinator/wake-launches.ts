/**
 * Wakes the launches of tasks that just took a WIP slot (a move or a deletion
 * freed it, store/wip-admission.ts): for each whose armed launch intent has
 * no dispatch claim yet, the launch runs in this process when it runs the
 * launch role (`launchInPlace`), else one launch wake-up is queued (job ID
 * per operation and session, so repeats collapse). Plain reads after the
 * commit; a crash before this is healed by the reaper's sweep, which finds
 * recent admissions whose launch has no claim.
 */
import { LAUNCH_QUEUE, launchJobId, type LaunchJob } from '../../queues/names';
import { readRows, type Db } from '../db/tx';
import type { Logger } from '../log';
import { addWakeup, type QueueSet } from './queues';

export interface LaunchWaker {
  db: Db;
  queues: QueueSet;
  log: Logger;
  launchInPlace?: (job: LaunchJob) => Promise<unknown>;
}

/** The armed, not yet claimed launches of these tasks. */
export async function pendingLaunches(db: Db, taskIds: readonly string[]): Promise<LaunchJob[]> {
  if (taskIds.length === 0) return [];
  const rows = await readRows<{ operation_id: string; task_id: string; session_id: string }>(
    db,
    `SELECT o.id AS operation_id, o.task_id, s.step_key AS session_id FROM tasks t
       JOIN task_creation_operations o ON o.id = t.creation_operation_id AND o.state = 'completed'
       JOIN task_creation_steps s ON s.operation_id = o.id AND s.kind = 'launch_intent' AND s.state = 'armed'
      WHERE t.id IN (${taskIds.map(() => '?').join(', ')})
        AND NOT EXISTS (SELECT 1 FROM task_launch_dispatch_claims c
                         WHERE c.creation_operation_id = o.id AND c.task_id = o.task_id AND c.state <> 'planned')`,
    [...taskIds],
  );
  return rows.map((r) => ({ operationId: r.operation_id, taskId: r.task_id, sessionId: r.session_id }));
}

export async function wakeLaunches(w: LaunchWaker, taskIds: readonly string[]): Promise<number> {
  const jobs = await pendingLaunches(w.db, taskIds);
  for (const job of jobs) {
    if (w.launchInPlace) {
      try {
        await w.launchInPlace(job);
        continue;
      } catch (err) {
        w.log.warn({ err, operation_id: job.operationId }, 'in-place launch failed; queueing its wake-up');
      }
    }
    await addWakeup(
      w.queues.get(LAUNCH_QUEUE),
      'launch',
      job,
      { jobId: launchJobId(job.operationId, job.sessionId) },
      true,
    );
  }
  return jobs.length;
}
