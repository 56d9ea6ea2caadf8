/**
 * Migration 7 of the ledger schema (after DispatchClaimStateIndex1796170260000):
 * `tasks.awaits_blockers bool NOT NULL DEFAULT false` — true from Begin while
 * the task waits for a later transition of its blockers: Begin sets it when
 * some blocker is not yet done under Begin's lock. The task's one
 * `task.dependencies_resolved` clears it, written by MarkTaskDone for a
 * created task or by Complete's phase B for one whose last blocker was done
 * while it was being created (src/store/task-done.ts, src/store/complete.ts).
 * And index `ix_task_blockers_blocker_task_id (blocker_task_id)`: marking a
 * task done reads the tasks it blocks, which the primary key `(task_id,
 * blocker_task_id)` cannot find without a scan of every edge. down() drops
 * both.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { boolColumn, detectSqlDialect, ident } from '../src/db/migration-columns';

const BLOCKER_INDEX = 'ix_task_blockers_blocker_task_id';

export class TaskBlockerResolution1796170320000 implements MigrationInterface {
  name = 'TaskBlockerResolution1796170320000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    const column = boolColumn('awaits_blockers', d, { default: false });
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
    await queryRunner.query(`ALTER TABLE ${ident(d, 'tasks')} DROP COLUMN ${ident(d, 'awaits_blockers')}`);
  }
}
