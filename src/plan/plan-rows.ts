/**
 * The row documents a plan binds and their `database_rows` entries.
 *
 * Contract of `planDatabaseRows(rows)`: one `{table, key, row_sha256}` per row
 * document, `row_sha256 = rowHash(doc)`, `key` the row's canonical primary key
 * (`<id>`, `<task_id>` for identities, `<task_id>:<repository_id>` for task
 * repositories), sorted by (table, key) in the validator's order.
 */
import { rowHash } from '../canonical/hash';
import { compareCanonicalKeys } from '../canonical/sorted-lists';
import type { PlanDatabaseRow } from '../canonical/types';
import type { PlannedRows } from './plan-types';

export function planDatabaseRows(rows: PlannedRows): PlanDatabaseRow[] {
  const out: PlanDatabaseRow[] = [
    { table: 'tasks', key: rows.tasks.id, row_sha256: rowHash(rows.tasks) },
    { table: 'task_identities', key: rows.task_identities.task_id, row_sha256: rowHash(rows.task_identities) },
    ...rows.task_repositories.map((r) => ({
      table: 'task_repositories',
      key: `${r.task_id}:${r.repository_id}`,
      row_sha256: rowHash(r),
    })),
    ...rows.task_environments.map((r) => ({ table: 'task_environments', key: r.id, row_sha256: rowHash(r) })),
  ];
  return out.sort((a, b) => compareCanonicalKeys([a.table, a.key], [b.table, b.key]));
}
