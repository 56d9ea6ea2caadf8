/**
 * Migration 7 of the ledger schema (after DispatchClaimStateIndex1796170260000):
 * `tasks.pending_resolution_by uuid NULL` — the blocker whose
 * `POST /tasks/:id/done` resolved this task's last dependency while the task
 * was still being created (`preparing|completing`). Complete's phase B then
 * writes the task's `task.dependencies_resolved` right after `task.created`
 * and clears it (src/store/task-done.ts, src/store/complete.ts). NULL: no
 * resolution is waiting. And index `ix_task_blockers_blocker_task_id
 * (blocker_task_id)`: marking a task done reads the tasks it blocks, which
 * the primary key `(task_id, blocker_task_id)` cannot find without a scan of
 * every edge. down() drops both.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident, uuidColumn } from '../src/db/migration-columns';

const BLOCKER_INDEX = 'ix_task_blockers_blocker_task_id';

export class TaskPendingResolution1796170320000 implements MigrationInterface {
  name = 'TaskPendingResolution1796170320000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    const column = uuidColumn('pending_resolution_by', d, { nullable: true });
    await queryRunner.query(`ALTER TABLE ${ident(d, 'tasks')} ADD COLUMN ${column.sql}`);
    await queryRunner.query(
      `CREATE INDEX ${ident(d, BLOCKER_INDEX)} ON ${ident(d, 'task_blockers')} (${ident(d, 'blocker_task_id')})`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres'
        ? `DROP INDEX ${ident(d, BLOCKER_INDEX)}`
        : `DROP INDEX ${ident(d, BLOCKER_INDEX)} ON ${ident(d, 'task_blockers')}`,
    );
    await queryRunner.query(`ALTER TABLE ${ident(d, 'tasks')} DROP COLUMN ${ident(d, 'pending_resolution_by')}`);
  }
}
