/**
 * The migration history on a scratch database of its own
 * (`taskledger_test_migrate_<dialect>`, so the shared test database is never
 * disturbed): up builds the committed schema dump, down() undoes each
 * migration completely, and up again rebuilds the identical schema. Also: the
 * committed dump in test/schema/ matches the shared migrated test database.
 */
import { readFile } from 'node:fs/promises';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_MIGRATIONS } from '../../migrations/index';
import { DUMP_FILES, dumpMysql, dumpPostgres } from '../../scripts/dump-schema';
import { recreateDatabase } from '../../src/db/admin';
import { dbConfigFromEnv } from '../../src/db/config';
import { EXPECTED_TABLES } from './expected-schema';
import { DIALECT, openDataSource } from './helpers';
import { MIGRATIONS_TABLE, readColumns, readTables } from './introspect';

const sharedUrl = dbConfigFromEnv().url;
const scratchUrl = (() => {
  const u = new URL(sharedUrl);
  u.pathname = `/taskledger_test_migrate_${DIALECT}`;
  return u.toString();
})();

const dump = (url: string) => (DIALECT === 'postgres' ? dumpPostgres(url) : dumpMysql(url));
const committedDump = () => readFile(DUMP_FILES[DIALECT], 'utf8');

/** Tables created by CleanupLaunchEvents, the migration before RepositoryRemoteSlug. */
const CLEANUP_LAUNCH_EVENTS_TABLES = [
  'task_resource_cleanup_jobs',
  'task_launch_dispatch_claims',
  'archive_membership_barriers',
  'event_outbox',
];

/** Tables created by TaskLifecycle, the last migration. */
const LIFECYCLE_TABLES = ['workspace_deletions', 'external_id_releases'];

async function repositoryColumns(): Promise<string[]> {
  return (await readColumns(ds)).filter((c) => c.table === 'repositories').map((c) => c.name);
}

async function taskColumns(): Promise<string[]> {
  return (await readColumns(ds)).filter((c) => c.table === 'tasks').map((c) => c.name);
}

async function indexesOf(table: string): Promise<string[]> {
  const rows = (await ds.query(
    DIALECT === 'postgres'
      ? 'SELECT indexname AS name FROM pg_indexes WHERE tablename = $1'
      : 'SELECT DISTINCT index_name AS name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ?',
    [table],
  )) as { name: string }[];
  return rows.map((r) => r.name);
}

const dispatchClaimIndexes = (): Promise<string[]> => indexesOf('task_launch_dispatch_claims');

let ds: DataSource;

beforeAll(async () => {
  await recreateDatabase(scratchUrl);
  ds = await openDataSource(scratchUrl);
});

afterAll(async () => {
  await ds?.destroy();
});

async function appliedCount(): Promise<number> {
  const rows = (await ds.query(`SELECT count(*) AS n FROM ${MIGRATIONS_TABLE}`)) as { n: string | number }[];
  return Number(rows[0]!.n);
}

describe(`migration history (${DIALECT})`, () => {
  it('lists migrations in timestamp order, each named after its timestamp', () => {
    const stamps = ALL_MIGRATIONS.map((M) => {
      const name = new M().name ?? M.name;
      expect(name).toBe(M.name);
      return Number(/(\d{13})$/.exec(name)?.[1]);
    });
    expect(stamps.every((s) => Number.isFinite(s))).toBe(true);
    expect([...stamps].sort((a, b) => a - b)).toEqual(stamps);
  });

  it('the committed dump matches the shared migrated test database', async () => {
    // Other files' tests create short-lived tables, triggers and functions in the shared database while they run
    // (test/db/connection-loss.test.ts, test/support/db-faults.ts): a dump taken then differs by those. Dump again
    // until one holds none of them; a schema that differs for good never matches.
    const expected = await committedDump();
    let actual = await dump(sharedUrl);
    for (const until = Date.now() + 60_000; actual !== expected && Date.now() < until;) {
      await new Promise((r) => setTimeout(r, 500));
      actual = await dump(sharedUrl);
    }
    expect(actual).toBe(expected);
  }, 90_000);

  it('up, down step by step, and up again on a scratch database', async () => {
    const all = [...EXPECTED_TABLES.map((t) => t.name), MIGRATIONS_TABLE].sort();

    const applied = await ds.runMigrations({ transaction: 'each' });
    expect(applied).toHaveLength(ALL_MIGRATIONS.length);
    expect(await readTables(ds)).toEqual(all);
    expect(await dump(scratchUrl)).toBe(await committedDump());

    // WorkflowWorkspaceIndexes: down() drops exactly its two indexes.
    expect(await indexesOf('workflows')).toContain('ix_workflows_workspace_created');
    expect(await indexesOf('workflow_steps')).toContain('ix_workflow_steps_workspace');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await indexesOf('workflows')).not.toContain('ix_workflows_workspace_created');
    expect(await indexesOf('workflow_steps')).not.toContain('ix_workflow_steps_workspace');
    expect(await indexesOf('workflow_steps')).toContain('uq_workflow_steps_workflow_position');
    expect(await readTables(ds)).toEqual(all);

    // StepLeaseIndex: PostgreSQL's partial indexes of running leases and open compensations; down() restores the
    // plain state indexes there. MySQL keeps the plain ones throughout.
    const plain = ['ix_task_creation_steps_state_lease_expires_at', 'ix_task_creation_steps_compensation_state'];
    const partial = ['ix_task_creation_steps_running_lease', 'ix_task_creation_steps_open_compensation'];
    const stepIndexes = () => indexesOf('task_creation_steps');
    expect(await stepIndexes()).toEqual(expect.arrayContaining(DIALECT === 'postgres' ? partial : plain));
    for (const ix of DIALECT === 'postgres' ? plain : partial) expect(await stepIndexes()).not.toContain(ix);
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await stepIndexes()).toEqual(expect.arrayContaining(plain));
    for (const ix of partial) expect(await stepIndexes()).not.toContain(ix);
    expect(await readTables(ds)).toEqual(all);

    // OutboxOperationIndex: down() drops exactly its index.
    expect(await indexesOf('event_outbox')).toContain('ix_event_outbox_operation_workspace_seq');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await indexesOf('event_outbox')).not.toContain('ix_event_outbox_operation_workspace_seq');
    expect(await indexesOf('event_outbox')).toContain('ix_event_outbox_workspace_seq');
    expect(await readTables(ds)).toEqual(all);

    // BarrierScopeIndex: down() drops exactly its index.
    const barrierIndex = 'ix_archive_membership_barriers_scope_state';
    expect(await indexesOf('archive_membership_barriers')).toContain(barrierIndex);
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await indexesOf('archive_membership_barriers')).not.toContain(barrierIndex);
    expect(await readTables(ds)).toEqual(all);

    // TaskEnvironmentTaskIndex: down() drops exactly its index.
    expect(await indexesOf('task_environments')).toContain('ix_task_environments_task_id');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await indexesOf('task_environments')).not.toContain('ix_task_environments_task_id');
    expect(await readTables(ds)).toEqual(all);

    // StagedAttachmentIndex: down() drops exactly its index.
    const stagedIndex = 'ix_task_message_attachments_owner_kind_updated_at';
    expect(await indexesOf('task_message_attachments')).toContain(stagedIndex);
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await indexesOf('task_message_attachments')).not.toContain(stagedIndex);
    expect(await readTables(ds)).toEqual(all);

    // TaskLifecycle: down() drops exactly its two tables, its task columns and their indexes.
    const lifecycleColumns = ['queued_at', 'admitted_at', 'deleted_at', 'deletion_operation_id'];
    const lifecycleIndexes = ['ix_tasks_admitted_at', 'ix_tasks_queue', 'ix_tasks_workflow_step_admitted'];
    expect(await taskColumns()).toEqual(expect.arrayContaining(lifecycleColumns));
    expect(await indexesOf('tasks')).toEqual(expect.arrayContaining(lifecycleIndexes));
    await ds.undoLastMigration({ transaction: 'each' });
    const beforeLifecycle = all.filter((t) => !LIFECYCLE_TABLES.includes(t));
    expect(await readTables(ds)).toEqual(beforeLifecycle);
    for (const c of lifecycleColumns) expect(await taskColumns()).not.toContain(c);
    for (const ix of lifecycleIndexes) expect(await indexesOf('tasks')).not.toContain(ix);

    // TaskBlockerResolution: down() drops exactly its column and its index.
    expect(await taskColumns()).toContain('awaits_blockers');
    expect(await indexesOf('task_blockers')).toContain('ix_task_blockers_blocker_task_id');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await taskColumns()).not.toContain('awaits_blockers');
    expect(await indexesOf('task_blockers')).not.toContain('ix_task_blockers_blocker_task_id');
    expect(await readTables(ds)).toEqual(beforeLifecycle);

    // DispatchClaimStateIndex: down() drops exactly its index.
    expect(await dispatchClaimIndexes()).toContain('ix_task_launch_dispatch_claims_state_updated_at');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await dispatchClaimIndexes()).not.toContain('ix_task_launch_dispatch_claims_state_updated_at');
    expect(await readTables(ds)).toEqual(beforeLifecycle);

    // RepositoryRemoteSlug: down() drops exactly its column.
    expect(await repositoryColumns()).toContain('remote_slug');
    await ds.undoLastMigration({ transaction: 'each' });
    expect(await readTables(ds)).toEqual(beforeLifecycle);
    expect(await repositoryColumns()).toEqual(['id', 'workspace_id', 'name', 'path', 'default_branch', 'created_at']);
    expect(await appliedCount()).toBe(ALL_MIGRATIONS.length - 10);

    await ds.undoLastMigration({ transaction: 'each' });
    expect(await readTables(ds)).toEqual(beforeLifecycle.filter((t) => !CLEANUP_LAUNCH_EVENTS_TABLES.includes(t)));
    expect(await appliedCount()).toBe(ALL_MIGRATIONS.length - 11);

    for (let i = 11; i < ALL_MIGRATIONS.length; i++) await ds.undoLastMigration({ transaction: 'each' });
    expect(await readTables(ds)).toEqual([MIGRATIONS_TABLE]);
    expect(await appliedCount()).toBe(0);

    const again = await ds.runMigrations({ transaction: 'each' });
    expect(again).toHaveLength(ALL_MIGRATIONS.length);
    expect(await dump(scratchUrl)).toBe(await committedDump());
  });
});
