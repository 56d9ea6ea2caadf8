/**
 * Migration 5 of the ledger schema (after CleanupLaunchEvents1796169780000):
 * `repositories.remote_slug str(255) NULL` — the repository's identity at its
 * provider (GitHub `owner/repo`, GitLab project path), which the
 * `remote_contribution_associate` step needs to address a pull/merge request.
 * NULL: the repository has no provider remote; a contribution on it fails
 * permanently. down() drops the column.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident, strColumn } from '../src/db/migration-columns';

export class RepositoryRemoteSlug1796170200000 implements MigrationInterface {
  name = 'RepositoryRemoteSlug1796170200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    const column = strColumn('remote_slug', 255, d, { nullable: true });
    await queryRunner.query(`ALTER TABLE ${ident(d, 'repositories')} ADD COLUMN ${column.sql}`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(`ALTER TABLE ${ident(d, 'repositories')} DROP COLUMN ${ident(d, 'remote_slug')}`);
  }
}
