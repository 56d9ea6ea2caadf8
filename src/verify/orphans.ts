/**
 * Rows that name a creation operation the ledger does not hold: a
 * `task.created` or `task.dependencies_resolved` event, a launch dispatch
 * claim or a cleanup job whose
 * operation row is missing. verify/run.ts pages from operations, so without
 * this pass such rows would never be read. One snapshot, reads only.
 */
import { readSnapshot } from '../db/snapshot';
import type { Db } from '../db/tx';
import type { Drift } from './drift';

const SOURCES = [
  {
    what: 'task.created event',
    sql: `SELECT e.event_id AS id, e.operation_id, e.task_id FROM event_outbox e
           WHERE e.type = 'task.created' AND NOT EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = e.operation_id)`,
    workspaceColumn: 'e.workspace_id',
  },
  {
    what: 'task.dependencies_resolved event',
    sql: `SELECT e.event_id AS id, e.operation_id, e.task_id FROM event_outbox e
           WHERE e.type = 'task.dependencies_resolved' AND NOT EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = e.operation_id)`,
    workspaceColumn: 'e.workspace_id',
  },
  {
    what: 'dispatch claim',
    sql: `SELECT c.id, c.creation_operation_id AS operation_id, c.task_id FROM task_launch_dispatch_claims c
           WHERE NOT EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = c.creation_operation_id)`,
    workspaceColumn: 'c.workspace_id',
  },
  {
    what: 'cleanup job',
    sql: `SELECT j.id, j.operation_id, j.task_id FROM task_resource_cleanup_jobs j
           WHERE NOT EXISTS (SELECT 1 FROM task_creation_operations o WHERE o.id = j.operation_id)`,
    workspaceColumn: 'j.workspace_id',
  },
] as const;

/** Up to `limit` orphan rows of each kind (of one workspace, when given). */
export async function findOrphans(db: Db, options: { workspaceId?: string; limit: number }): Promise<Drift[]> {
  return readSnapshot(db, async (read) => {
    const out: Drift[] = [];
    for (const s of SOURCES) {
      const scope = options.workspaceId ? ` AND ${s.workspaceColumn} = ?` : '';
      const rows = await read<{ id: string; operation_id: string; task_id: string }>(
        `${s.sql}${scope} ORDER BY 1 LIMIT ${Math.trunc(options.limit)}`,
        options.workspaceId ? [options.workspaceId] : [],
      );
      for (const r of rows) {
        out.push({
          code: 'orphan_row',
          operation_id: r.operation_id,
          task_id: r.task_id,
          subject: `${s.what} ${r.id}`,
          message: 'names a creation operation the ledger does not hold',
        });
      }
    }
    return out;
  });
}
