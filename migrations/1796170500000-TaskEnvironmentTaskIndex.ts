/**
 * Migration 10 of the ledger schema (after StagedAttachmentIndex1796170440000):
 * index `ix_task_environments_task_id (task_id)` on `task_environments`.
 * Complete reads a task's planned environments by task (both phases,
 * `verifyPlannedRowsLocked`, a shared locking read) and the launch spec joins
 * them by task; without it each read scanned every environment ever made, and
 * on MySQL/MariaDB the locking scan waited on (and deadlocked with) the rows
 * of unrelated creations. down() drops the index.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const TABLE = 'task_environments';
const INDEX = 'ix_task_environments_task_id';

export class TaskEnvironmentTaskIndex1796170500000 implements MigrationInterface {
  name = 'TaskEnvironmentTaskIndex1796170500000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(`CREATE INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)} (${ident(d, 'task_id')})`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres' ? `DROP INDEX ${ident(d, INDEX)}` : `DROP INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)}`,
    );
  }
}
