/**
 * Migration 12 of the ledger schema (after BarrierScopeIndex1796170560000):
 * index `ix_event_outbox_operation_workspace_seq (operation_id, workspace_id,
 * seq)` on `event_outbox`. The delivery pass after each Complete reads its
 * operation's undelivered events (`operationEventsStatement`,
 * src/store/outbox-mark.ts: operation, workspace, not yet delivered). No index
 * started with the operation, so PostgreSQL, on tables it had not analyzed yet
 * (a new deployment's first minutes), intersected the workspace's whole outbox
 * with every undelivered event: a scan that grew with the outbox (0.7 ms per
 * creation at 1,000 events, 2.5 ms at 3,000). Both equality columns are in
 * the index so that even the planner's default guesses rank it first
 * (test/schema/fresh-plans.test.ts). down() drops the index.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect, ident } from '../src/db/migration-columns';

const TABLE = 'event_outbox';
const INDEX = 'ix_event_outbox_operation_workspace_seq';

export class OutboxOperationIndex1796170620000 implements MigrationInterface {
  name = 'OutboxOperationIndex1796170620000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      `CREATE INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)} (${['operation_id', 'workspace_id', 'seq'].map((c) => ident(d, c)).join(', ')})`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await queryRunner.query(
      d === 'postgres' ? `DROP INDEX ${ident(d, INDEX)}` : `DROP INDEX ${ident(d, INDEX)} ON ${ident(d, TABLE)}`,
    );
  }
}
