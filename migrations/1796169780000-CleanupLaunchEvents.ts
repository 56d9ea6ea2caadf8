/**
 * Migration 4 of the ledger schema (after LiveTaskRows1796169720000): cleanup
 * jobs, launch dispatch claims, archive membership barriers and the event
 * outbox of docs/schema.md. down() drops the four tables.
 */
import type { MigrationInterface, QueryRunner } from 'typeorm';
import {
  type SqlDialect,
  type TableSpec,
  bigSerialColumn,
  createTables,
  createdAtColumn,
  detectSqlDialect,
  docColumn,
  dropTables,
  hashColumn,
  inCheck,
  intColumn,
  strColumn,
  tsColumn,
  updatedAtColumn,
  uuidColumn,
} from '../src/db/migration-columns';
import { CLEANUP_JOB_STATES, DISPATCH_STATES, OUTBOX_EVENT_TYPES, STEP_KINDS } from '../src/domain/vocab';

/** A cleanup job undoes one step kind's effect, or a launch dispatch. */
const CLEANUP_JOB_KINDS = [...STEP_KINDS, 'launch_dispatch'] as const;
/** Closed sets of this migration that have no tuple in src/domain/vocab.ts. */
const BARRIER_KINDS = ['archive', 'workspace_deletion'] as const;
const BARRIER_STATES = ['active', 'released'] as const;

function cleanupJobs(d: SqlDialect): TableSpec {
  const t = 'task_resource_cleanup_jobs';
  return {
    name: t,
    columns: [
      uuidColumn('id', d),
      uuidColumn('workspace_id', d),
      uuidColumn('task_id', d),
      uuidColumn('operation_id', d),
      uuidColumn('step_id', d, { nullable: true }),
      strColumn('kind', 40, d),
      strColumn('reason', 64, d),
      docColumn('proof_json', d),
      hashColumn('proof_sha256', d),
      strColumn('state', 16, d),
      intColumn('generation', d, { default: 0 }),
      strColumn('lease_owner', 200, d, { nullable: true }),
      tsColumn('lease_expires_at', d, { nullable: true }),
      tsColumn('next_attempt_at', d, { nullable: true }),
      intColumn('attempt', d, { default: 0 }),
      strColumn('error_code', 64, d, { nullable: true }),
      docColumn('error_json', d, { nullable: true }),
      createdAtColumn(d),
      updatedAtColumn(d),
      tsColumn('finished_at', d, { nullable: true }),
    ],
    primaryKey: ['id'],
    checks: [inCheck(d, t, 'kind', CLEANUP_JOB_KINDS), inCheck(d, t, 'state', CLEANUP_JOB_STATES)],
    indexes: [{ name: 'ix_task_resource_cleanup_jobs_state_next_attempt_at', columns: ['state', 'next_attempt_at'] }],
  };
}

function dispatchClaims(d: SqlDialect): TableSpec {
  const t = 'task_launch_dispatch_claims';
  return {
    name: t,
    columns: [
      uuidColumn('id', d),
      uuidColumn('creation_operation_id', d),
      uuidColumn('task_id', d),
      uuidColumn('session_id', d),
      uuidColumn('workspace_id', d),
      strColumn('state', 16, d),
      intColumn('generation', d, { default: 0 }),
      strColumn('lease_owner', 200, d, { nullable: true }),
      tsColumn('lease_expires_at', d, { nullable: true }),
      intColumn('lifecycle_generation', d),
      strColumn('idempotency_key', 255, d),
      hashColumn('request_sha256', d),
      docColumn('runtime_handle', d, { nullable: true }),
      docColumn('evidence_json', d, { nullable: true }),
      hashColumn('evidence_sha256', d, { nullable: true }),
      uuidColumn('deletion_operation_id', d, { nullable: true }),
      intColumn('attempt', d, { default: 0 }),
      strColumn('error_code', 64, d, { nullable: true }),
      docColumn('error_json', d, { nullable: true }),
      createdAtColumn(d),
      updatedAtColumn(d),
    ],
    primaryKey: ['id'],
    uniques: [{ name: 'uq_launch_dispatch', columns: ['creation_operation_id', 'task_id', 'session_id'] }],
    checks: [inCheck(d, t, 'state', DISPATCH_STATES)],
  };
}

function barriers(d: SqlDialect): TableSpec {
  const t = 'archive_membership_barriers';
  return {
    name: t,
    columns: [
      uuidColumn('operation_id', d),
      uuidColumn('scope_workspace_id', d),
      strColumn('kind', 24, d),
      strColumn('state', 16, d),
      createdAtColumn(d),
      tsColumn('released_at', d, { nullable: true }),
    ],
    primaryKey: ['operation_id', 'scope_workspace_id'],
    checks: [inCheck(d, t, 'kind', BARRIER_KINDS), inCheck(d, t, 'state', BARRIER_STATES)],
  };
}

function outbox(d: SqlDialect): TableSpec {
  return {
    name: 'event_outbox',
    columns: [
      // Delivery order: assigned by the database at insert, never by Node.
      bigSerialColumn('seq', d),
      uuidColumn('event_id', d),
      uuidColumn('workspace_id', d),
      uuidColumn('task_id', d),
      intColumn('revision', d),
      strColumn('type', 40, d),
      uuidColumn('operation_id', d),
      docColumn('payload_json', d),
      hashColumn('payload_sha256', d),
      createdAtColumn(d),
      tsColumn('delivered_at', d, { nullable: true }),
      intColumn('delivery_attempts', d, { default: 0 }),
    ],
    primaryKey: ['seq'],
    uniques: [
      { name: 'uq_event_outbox_event_id', columns: ['event_id'] },
      // At most one event per task revision: one `task.created` (revision one) per task.
      { name: 'uq_event_outbox_task_revision', columns: ['task_id', 'revision'] },
    ],
    checks: [inCheck(d, 'event_outbox', 'type', OUTBOX_EVENT_TYPES)],
    indexes: [
      { name: 'ix_event_outbox_delivered_at_seq', columns: ['delivered_at', 'seq'] },
      { name: 'ix_event_outbox_workspace_seq', columns: ['workspace_id', 'seq'] },
    ],
  };
}

function tables(d: SqlDialect): TableSpec[] {
  return [cleanupJobs(d), dispatchClaims(d), barriers(d), outbox(d)];
}

export class CleanupLaunchEvents1796169780000 implements MigrationInterface {
  name = 'CleanupLaunchEvents1796169780000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await createTables(queryRunner, d, tables(d));
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const d = await detectSqlDialect(queryRunner);
    await dropTables(queryRunner, d, tables(d));
  }
}
