/**
 * Migration 2 of the ledger schema (after SetupAndAuthority1796169600000): the
 * creation ledger of docs/schema.md — task_creation_operations,
 * task_creation_steps (FK to its operation, the step CHECKs) and lock_keys.
 * down() drops the three tables (steps first).
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  type SqlDialect,
  type TableSpec,
  boolColumn,
  createTables,
  createdAtColumn,
  detectSqlDialect,
  docColumn,
  dropTables,
  hashColumn,
  ident,
  inCheck,
  intColumn,
  strColumn,
  tsColumn,
  updatedAtColumn,
  uuidColumn,
} from '../src/db/migration-columns';
import {
  BEGIN_OUTCOMES,
  COMPENSATION_STATES,
  OPERATION_STATES,
  RECOVERY_ACTIONS,
  START_POLICIES,
  STEP_DISPOSITIONS,
  STEP_KINDS,
  STEP_STATES,
  sqlInList,
} from '../src/domain/vocab';

const OPS = 'task_creation_operations';
const STEPS = 'task_creation_steps';

function operations(d: SqlDialect): TableSpec {
  return {
    name: OPS,
    columns: [
      uuidColumn('id', d),
      uuidColumn('workspace_id', d),
      uuidColumn('task_id', d),
      strColumn('state', 24, d),
      docColumn('plan_json', d),
      hashColumn('manifest_hash', d),
      docColumn('actor_json', d),
      hashColumn('actor_binding_hash', d),
      hashColumn('completion_token_sha256', d),
      strColumn('start_policy', 16, d),
      intColumn('generation', d, { default: 0 }),
      strColumn('lease_owner', 200, d, { nullable: true }),
      tsColumn('lease_expires_at', d, { nullable: true }),
      strColumn('recovery_action', 40, d, { nullable: true }),
      intColumn('recovery_generation', d, { default: 0 }),
      strColumn('recovery_owner', 200, d, { nullable: true }),
      tsColumn('recovery_lease_expires_at', d, { nullable: true }),
      hashColumn('recovery_actor_binding_hash', d, { nullable: true }),
      uuidColumn('release_operation_id', d, { nullable: true }),
      intColumn('release_generation', d, { default: 0 }),
      boolColumn('release_applied', d, { default: false }),
      strColumn('result_outcome', 24, d, { nullable: true }),
      intColumn('result_revision', d, { nullable: true }),
      uuidColumn('result_event_id', d, { nullable: true }),
      strColumn('abort_cause', 64, d, { nullable: true }),
      strColumn('error_code', 64, d, { nullable: true }),
      docColumn('error_json', d, { nullable: true }),
      createdAtColumn(d),
      updatedAtColumn(d),
      tsColumn('completing_at', d, { nullable: true }),
      tsColumn('completed_at', d, { nullable: true }),
      tsColumn('aborted_at', d, { nullable: true }),
    ],
    primaryKey: ['id'],
    checks: [
      inCheck(d, OPS, 'state', OPERATION_STATES),
      inCheck(d, OPS, 'start_policy', START_POLICIES),
      inCheck(d, OPS, 'recovery_action', RECOVERY_ACTIONS),
      inCheck(d, OPS, 'result_outcome', BEGIN_OUTCOMES),
    ],
    indexes: [
      { name: 'ix_task_creation_operations_state_updated_at', columns: ['state', 'updated_at'] },
      { name: 'ix_task_creation_operations_workspace_created_at', columns: ['workspace_id', 'created_at'] },
      { name: 'ix_task_creation_operations_task_id', columns: ['task_id'] },
    ],
  };
}

function steps(d: SqlDialect): TableSpec {
  const state = ident(d, 'state');
  return {
    name: STEPS,
    columns: [
      uuidColumn('id', d),
      uuidColumn('operation_id', d),
      uuidColumn('task_id', d),
      uuidColumn('workspace_id', d),
      strColumn('kind', 40, d),
      strColumn('step_key', 255, d),
      docColumn('request_json', d),
      hashColumn('request_sha256', d),
      hashColumn('idempotency_key', d),
      strColumn('state', 16, d),
      intColumn('generation', d, { default: 0 }),
      intColumn('attempt', d, { default: 0 }),
      strColumn('lease_owner', 200, d, { nullable: true }),
      tsColumn('lease_expires_at', d, { nullable: true }),
      tsColumn('next_attempt_at', d, { nullable: true }),
      docColumn('evidence_json', d, { nullable: true }),
      hashColumn('evidence_sha256', d, { nullable: true }),
      strColumn('provider_handle', 1024, d, { nullable: true }),
      hashColumn('ownership_marker', d, { nullable: true }),
      uuidColumn('cleanup_job_id', d, { nullable: true }),
      strColumn('disposition', 24, d, { default: "'none'" }),
      strColumn('compensation_state', 16, d, { default: "'none'" }),
      intColumn('compensation_generation', d, { default: 0 }),
      strColumn('compensation_lease_owner', 200, d, { nullable: true }),
      tsColumn('compensation_lease_expires_at', d, { nullable: true }),
      docColumn('compensation_evidence_json', d, { nullable: true }),
      hashColumn('compensation_evidence_sha256', d, { nullable: true }),
      strColumn('error_code', 64, d, { nullable: true }),
      docColumn('error_json', d, { nullable: true }),
      createdAtColumn(d),
      updatedAtColumn(d),
    ],
    primaryKey: ['id'],
    uniques: [{ name: 'uq_task_creation_steps_key', columns: ['operation_id', 'kind', 'step_key'] }],
    checks: [
      inCheck(d, STEPS, 'kind', STEP_KINDS),
      inCheck(d, STEPS, 'state', STEP_STATES),
      inCheck(d, STEPS, 'disposition', STEP_DISPOSITIONS),
      inCheck(d, STEPS, 'compensation_state', COMPENSATION_STATES),
      {
        // `armed` and `cancelled` exist only for launch intents (the kind and
        // state CHECKs above already pin both columns to exact vocabulary).
        name: 'chk_task_creation_steps_launch_only_states',
        expression: `${state} NOT IN (${sqlInList(['armed', 'cancelled'])}) OR ${ident(d, 'kind')} = 'launch_intent'`,
      },
      {
        // Only a workspace deletion cancels a launch intent.
        name: 'chk_task_creation_steps_cancelled_disposition',
        expression: `${state} <> 'cancelled' OR ${ident(d, 'disposition')} = 'workspace_deleted'`,
      },
    ],
    indexes: [
      { name: 'ix_task_creation_steps_state_lease_expires_at', columns: ['state', 'lease_expires_at'] },
      { name: 'ix_task_creation_steps_compensation_state', columns: ['compensation_state'] },
    ],
    foreignKeys: [
      {
        name: 'fk_task_creation_steps_operation',
        columns: ['operation_id'],
        referencedTable: OPS,
        referencedColumns: ['id'],
      },
    ],
  };
}

function lockKeys(d: SqlDialect): TableSpec {
  return {
    // Transaction-scoped key locks: insert the key if missing, then SELECT ... FOR UPDATE it.
    name: 'lock_keys',
    columns: [hashColumn('key_hash', d), createdAtColumn(d)],
    primaryKey: ['key_hash'],
  };
}

function tables(d: SqlDialect): TableSpec[] {
  return [operations(d), steps(d), lockKeys(d)];
}

export class CreationLedger1796169660000 implements MigrationInterface {
  name = 'CreationLedger1796169660000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await createTables(queryRunner, d, tables(d));
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await dropTables(queryRunner, d, tables(d));
  }
}
