/**
 * Migration 8 of the ledger schema (after TaskBlockerResolution1796170320000):
 * the task's life after creation (docs/adr/0009-task-lifecycle.md).
 *
 * - `tasks`: `queued_at ts NULL` (when the task joined its step's WIP queue;
 *   promotion takes the oldest first), `admitted_at ts NULL` (when it took a
 *   WIP slot; the reaper re-sends a lost launch wake-up of a recent
 *   admission), `deleted_at ts NULL` and `deletion_operation_id uuid NULL`
 *   (the task deletion, or the workspace deletion, that deleted it). Indexes
 *   `ix_tasks_workflow_step_admitted (workflow_step_id, wip_admitted)` (slot
 *   count under the step's admission lock), `ix_tasks_queue
 *   (queued_for_step_id, queued_at)` (queue heads) and `ix_tasks_admitted_at
 *   (admitted_at)`.
 * - `workspace_deletions` [tier 4]: one per workspace (UNIQUE), its state
 *   (`running` until the last cascade batch, then `completed`) and what the
 *   cascade did so far.
 * - `external_id_releases` [tier 4]: a recorded external-ID release, `running`
 *   while its holder is `preparing-release`, then `completed`.
 * down() drops both tables, the indexes and the columns.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  type SqlDialect,
  type TableSpec,
  createTables,
  detectSqlDialect,
  dropTables,
  exactColumn,
  ident,
  inCheck,
  intColumn,
  nowDefault,
  strColumn,
  tsColumn,
  updatedAtColumn,
  uuidColumn,
} from '../src/db/migration-columns';
import { RELEASE_STATES, WORKSPACE_DELETION_STATES } from '../src/domain/vocab';

const TASK_INDEXES: { name: string; columns: string[] }[] = [
  { name: 'ix_tasks_workflow_step_admitted', columns: ['workflow_step_id', 'wip_admitted'] },
  { name: 'ix_tasks_queue', columns: ['queued_for_step_id', 'queued_at'] },
  { name: 'ix_tasks_admitted_at', columns: ['admitted_at'] },
];

function workspaceDeletions(d: SqlDialect): TableSpec {
  const t = 'workspace_deletions';
  return {
    name: t,
    columns: [
      uuidColumn('id', d),
      uuidColumn('workspace_id', d),
      strColumn('state', 16, d),
      strColumn('requested_by', 200, d),
      intColumn('completed_creations', d, { default: 0 }),
      intColumn('aborted_creations', d, { default: 0 }),
      intColumn('deleted_tasks', d, { default: 0 }),
      intColumn('cancelled_launches', d, { default: 0 }),
      intColumn('transferred_launches', d, { default: 0 }),
      intColumn('cleanup_jobs', d, { default: 0 }),
      intColumn('waiting_operations', d, { default: 0 }),
      intColumn('batches', d, { default: 0 }),
      tsColumn('requested_at', d, { default: nowDefault(d) }),
      updatedAtColumn(d),
      tsColumn('completed_at', d, { nullable: true }),
    ],
    primaryKey: ['id'],
    uniques: [{ name: 'uq_workspace_deletions_workspace', columns: ['workspace_id'] }],
    checks: [inCheck(d, t, 'state', WORKSPACE_DELETION_STATES)],
    indexes: [{ name: 'ix_workspace_deletions_state', columns: ['state'] }],
  };
}

function externalIdReleases(d: SqlDialect): TableSpec {
  const t = 'external_id_releases';
  return {
    name: t,
    columns: [
      uuidColumn('id', d),
      uuidColumn('workspace_id', d),
      uuidColumn('task_id', d),
      uuidColumn('creation_operation_id', d),
      exactColumn('external_id', d),
      strColumn('holder_state', 24, d),
      strColumn('state', 16, d),
      strColumn('requested_by', 200, d),
      tsColumn('requested_at', d, { default: nowDefault(d) }),
      updatedAtColumn(d),
      tsColumn('completed_at', d, { nullable: true }),
    ],
    primaryKey: ['id'],
    checks: [inCheck(d, t, 'state', RELEASE_STATES), inCheck(d, t, 'holder_state', ['preparing', 'completed'])],
    indexes: [
      { name: 'ix_external_id_releases_state', columns: ['state'] },
      { name: 'ix_external_id_releases_operation', columns: ['creation_operation_id'] },
    ],
  };
}

export class TaskLifecycle1796170380000 implements MigrationInterface {
  name = 'TaskLifecycle1796170380000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    const tasks = ident(d, 'tasks');
    for (const c of [
      tsColumn('queued_at', d, { nullable: true }),
      tsColumn('admitted_at', d, { nullable: true }),
      tsColumn('deleted_at', d, { nullable: true }),
      uuidColumn('deletion_operation_id', d, { nullable: true }),
    ]) {
      await queryRunner.query(`ALTER TABLE ${tasks} ADD COLUMN ${c.sql}`);
    }
    for (const ix of TASK_INDEXES) {
      await queryRunner.query(
        `CREATE INDEX ${ident(d, ix.name)} ON ${tasks} (${ix.columns.map((c) => ident(d, c)).join(', ')})`,
      );
    }
    await createTables(queryRunner, d, [workspaceDeletions(d), externalIdReleases(d)]);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await dropTables(queryRunner, d, [workspaceDeletions(d), externalIdReleases(d)]);
    const tasks = ident(d, 'tasks');
    for (const ix of [...TASK_INDEXES].reverse()) {
      await queryRunner.query(
        d === 'postgres' ? `DROP INDEX ${ident(d, ix.name)}` : `DROP INDEX ${ident(d, ix.name)} ON ${tasks}`,
      );
    }
    for (const c of ['deletion_operation_id', 'deleted_at', 'admitted_at', 'queued_at']) {
      await queryRunner.query(`ALTER TABLE ${tasks} DROP COLUMN ${ident(d, c)}`);
    }
  }
}
