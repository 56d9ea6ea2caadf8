/**
 * Migration 6 of the ledger schema (after RepositoryRemoteSlug1796170200000):
 * index `ix_task_launch_dispatch_claims_state_updated_at (state, updated_at)`
 * on `task_launch_dispatch_claims`. The reaper's dispatch pass looks for
 * `running` claims whose lease expired, `unknown` claims and `retry_wait`
 * claims on every sweep; without it each look scans every launch ever made.
 * down() drops the index.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const TABLE = 'task_launch_dispatch_claims';
const INDEX = 'ix_task_launch_dispatch_claims_state_updated_at';

export class DispatchClaimStateIndex1796170260000 implements MigrationInterface {
  name = 'DispatchClaimStateIndex1796170260000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      `CREATE INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)} (${ident(d, 'state')}, ${ident(d, 'updated_at')})`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres' ? `DROP INDEX ${ident(d, INDEX)}` : `DROP INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)}`,
    );
  }
}
