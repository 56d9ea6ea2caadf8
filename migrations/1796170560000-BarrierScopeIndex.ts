/**
 * Migration 11 of the ledger schema (after TaskEnvironmentTaskIndex1796170500000):
 * index `ix_archive_membership_barriers_scope_state (scope_workspace_id,
 * state)` on `archive_membership_barriers`. Every Begin reads its workspace's
 * active barriers with a shared lock (src/store/begin-insert.ts); the primary
 * key starts with the operation, so without it each Begin scanned every
 * barrier ever written (they stay, `released`), and on MySQL/MariaDB the
 * locking scan waited on the barrier a workspace deletion was writing in
 * another workspace. down() drops the index.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const TABLE = 'archive_membership_barriers';
const INDEX = 'ix_archive_membership_barriers_scope_state';

export class BarrierScopeIndex1796170560000 implements MigrationInterface {
  name = 'BarrierScopeIndex1796170560000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      `CREATE INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)} (${ident(d, 'scope_workspace_id')}, ${ident(d, 'state')})`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres' ? `DROP INDEX ${ident(d, INDEX)}` : `DROP INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)}`,
    );
  }
}
