/**
 * Migration 9 of the ledger schema (after TaskLifecycle1796170380000): index
 * `ix_task_message_attachments_owner_kind_updated_at (owner_kind,
 * updated_at)` on `task_message_attachments`. The reaper's staged-upload
 * expiry (src/runtime/staged-expiry.ts) looks for `staging` rows staged
 * longer than TASKLEDGER_STAGED_TTL_MS, oldest first; without it each look
 * scans every attachment ever claimed. down() drops the index.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const TABLE = 'task_message_attachments';
const INDEX = 'ix_task_message_attachments_owner_kind_updated_at';

export class StagedAttachmentIndex1796170440000 implements MigrationInterface {
  name = 'StagedAttachmentIndex1796170440000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      `CREATE INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)} (${ident(d, 'owner_kind')}, ${ident(d, 'updated_at')})`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres' ? `DROP INDEX ${ident(d, INDEX)}` : `DROP INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)}`,
    );
  }
}
