/**
 * Migration 13 of the ledger schema (after OutboxOperationIndex1796170620000),
 * PostgreSQL only: `task_creation_steps`' two state indexes become partial
 * indexes of the rows their readers look for.
 * - `ix_task_creation_steps_state_lease_expires_at (state, lease_expires_at)`
 *   -> `ix_task_creation_steps_running_lease (lease_expires_at) WHERE state =
 *   'running'` (the reaper's look for expired leases);
 * - `ix_task_creation_steps_compensation_state (compensation_state)` ->
 *   `ix_task_creation_steps_open_compensation (compensation_state) WHERE
 *   compensation_state <> 'none'` (the sweeps' looks for compensations
 *   required, running, waiting or unknown).
 *
 * Why: on tables it had not analyzed yet (a new deployment's first minutes,
 * and every generic plan a connection prepared then), PostgreSQL took a state
 * index for statements that name a step's state as well as its key or id:
 * Complete's check of the launch intent, the delivery pass's join to the
 * armed intent, the records' compare-and-sets, a batch's fence on the rows it
 * wrote. Each then read every step in that state (nearly all are `armed` or
 * `succeeded`, and nearly all compensations `none`): ~500-600 buffers and
 * ~1.7 ms per call after 2,000 creations, twice per creation and growing
 * (ADR 0038). A partial index holds only the rows in flight or in trouble,
 * and a statement can use it only when it names such a state itself, so no
 * plan can read more than those through it.
 *
 * MySQL and MariaDB keep the plain indexes: they have no partial indexes,
 * plan with the statement's values (the client interpolates; no generic
 * plans), estimate ranges by index dives, and the fences compare strings as
 * `BINARY col = ?`, which no index serves. down() restores the plain indexes
 * on PostgreSQL.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { detectSqlDialect } from '../src/db/migration-columns';

const PLAIN = {
  ix_task_creation_steps_state_lease_expires_at: '("state", "lease_expires_at")',
  ix_task_creation_steps_compensation_state: '("compensation_state")',
};
const PARTIAL = {
  ix_task_creation_steps_running_lease: `("lease_expires_at") WHERE "state" = 'running'`,
  ix_task_creation_steps_open_compensation: `("compensation_state") WHERE "compensation_state" <> 'none'`,
};

async function replace(queryRunner: QueryRunner, drop: object, create: Record<string, string>): Promise<void> {
  if ((await detectSqlDialect(queryRunner)) !== 'postgres') return;
  for (const [name, spec] of Object.entries(create)) {
    await queryRunner.query(`CREATE INDEX "${name}" ON "task_creation_steps" ${spec}`);
  }
  for (const name of Object.keys(drop)) await queryRunner.query(`DROP INDEX "${name}"`);
}

export class StepLeaseIndex1796170680000 implements MigrationInterface {
  name = 'StepLeaseIndex1796170680000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await replace(queryRunner, PLAIN, PARTIAL);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await replace(queryRunner, PARTIAL, PLAIN);
  }
}
