/**
 * Locking reads by a secondary key lock only the rows they return, also on a
 * new, small database (`forceIndexSql`, src/db/dialect.ts). On MySQL/MariaDB
 * the optimizer prefers to scan the primary key of a small table over
 * sorting the rows `ORDER BY id` asks for, and a locking scan waits on every
 * row it passes: the steps' lock of one operation waited on another
 * operation's steps, and two of them deadlocked (the benches counted up to
 * 181 deadlocks in 320 creations). Here, on a freshly migrated scratch
 * database holding two operations' steps and environments: one transaction
 * holds the first operation's rows (steps, environments, a workspace
 * barrier); the second's locking reads must not wait for it. Both dialects (PostgreSQL never locks rows it does
 * not return; on MySQL the same reads made to scan are shown to wait: the
 * plan the forced index and the new index rule out).
 */
import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recreateDatabase } from '../../src/db/admin';
import { dbConfigFromEnv } from '../../src/db/config';
import { toDialectSql } from '../../src/db/dialect';
import { stepsLockStatement } from '../../src/store/step-rows';
import { DIALECT, openDataSource } from '../schema/helpers';

const scratchUrl = (() => {
  const u = new URL(dbConfigFromEnv().url);
  u.pathname = `/taskledger_test_lock_scope_${DIALECT}`;
  return u.toString();
})();

let ds: DataSource;
const ops = [randomUUID(), randomUUID()] as const;
const tasks = [randomUUID(), randomUUID()] as const;
const scopes = [randomUUID(), randomUUID()] as const;

/** Rows without their parents: only the locking reads are under test. */
async function seed(): Promise<void> {
  const qr = ds.createQueryRunner();
  await qr.connect();
  try {
    await qr.query(DIALECT === 'postgres' ? 'SET session_replication_role = replica' : 'SET FOREIGN_KEY_CHECKS = 0');
    const ws = randomUUID();
    for (const [i, op] of ops.entries()) {
      for (const kind of ['session_prepare', 'launch_intent']) {
        await qr.query(
          toDialectSql(
            DIALECT,
            `INSERT INTO task_creation_steps (id, operation_id, task_id, workspace_id, kind, step_key, request_json,
               request_sha256, idempotency_key, state) VALUES (?, ?, ?, ?, ?, ?, '{}', ?, ?, 'succeeded')`,
          ),
          [
            randomUUID(),
            op,
            tasks[i],
            ws,
            kind,
            randomUUID(),
            'a'.repeat(64),
            randomUUID().replace(/-/g, '') + 'a'.repeat(32),
          ],
        );
      }
      await qr.query(
        toDialectSql(
          DIALECT,
          `INSERT INTO task_environments (id, workspace_id, task_id, kind, operation_id) VALUES (?, ?, ?, 'task', ?)`,
        ),
        [randomUUID(), ws, tasks[i], op],
      );
      await qr.query(
        toDialectSql(
          DIALECT,
          `INSERT INTO archive_membership_barriers (operation_id, scope_workspace_id, kind, state)
           VALUES (?, ?, 'workspace_deletion', 'released')`,
        ),
        [op, scopes[i]],
      );
    }
  } finally {
    await qr.release();
  }
}

beforeAll(async () => {
  await recreateDatabase(scratchUrl);
  ds = await openDataSource(scratchUrl);
  await ds.runMigrations({ transaction: 'each' });
  await seed();
});

afterAll(async () => {
  await ds?.destroy();
});

async function open(): Promise<QueryRunner> {
  const qr = ds.createQueryRunner();
  await qr.connect();
  // A wait shows up as an error within a second instead of the default 50 s.
  await qr.query(DIALECT === 'postgres' ? "SET lock_timeout = '1s'" : 'SET SESSION innodb_lock_wait_timeout = 1');
  await qr.query('START TRANSACTION');
  return qr;
}

const ENV_READ = (force: string) =>
  `SELECT id FROM task_environments ${force} WHERE task_id = ? AND operation_id IS NOT NULL ORDER BY id ${
    DIALECT === 'postgres' ? 'FOR SHARE' : 'LOCK IN SHARE MODE'
  }`;

/** Whether `sql` for the second operation runs while another transaction holds the first one's rows. */
async function runsBeside(holdSql: string, holdParams: unknown[], sql: string, params: unknown[]): Promise<boolean> {
  const holder = await open();
  const other = await open();
  try {
    await holder.query(toDialectSql(DIALECT, holdSql), holdParams);
    await other.query(toDialectSql(DIALECT, sql), params);
    return true;
  } catch (err) {
    if (/lock wait timeout|lock timeout|canceling statement due to lock timeout/i.test(String(err))) return false;
    throw err;
  } finally {
    await other.query('ROLLBACK').catch(() => undefined);
    await holder.query('ROLLBACK').catch(() => undefined);
    await other.release();
    await holder.release();
  }
}

describe('locking reads by a secondary key, on a small new database', () => {
  it("the steps' lock of one operation does not wait on another's", async () => {
    const first = stepsLockStatement(ops[0], DIALECT);
    const second = stepsLockStatement(ops[1], DIALECT);
    expect(await runsBeside(first.sql, [...first.params], second.sql, [...second.params])).toBe(true);
    if (DIALECT === 'mysql') {
      // The plan the index is forced against: the same read scanning the primary key waits on the other's rows.
      const scan = second.sql.replace(/FORCE INDEX \([^)]*\)/, 'IGNORE INDEX (uq_task_creation_steps_key)');
      expect(await runsBeside(first.sql, [...first.params], scan, [...second.params])).toBe(false);
    }
  });

  it("Complete's read of a task's planned environments does not wait on another task's", async () => {
    const force = DIALECT === 'mysql' ? 'FORCE INDEX (ix_task_environments_task_id)' : '';
    const hold = `SELECT id FROM task_environments WHERE task_id = ? ORDER BY id FOR UPDATE`;
    expect(await runsBeside(hold, [tasks[0]], ENV_READ(force), [tasks[1]])).toBe(true);
    if (DIALECT === 'mysql') {
      // Without the index (before migration 10), the read scans every environment and waits on the other's row.
      const scan = ENV_READ('IGNORE INDEX (ix_task_environments_task_id)');
      expect(await runsBeside(hold, [tasks[0]], scan, [tasks[1]])).toBe(false);
    }
  });

  it("Begin's read of its workspace's barriers does not wait on another workspace's", async () => {
    const force = DIALECT === 'mysql' ? 'FORCE INDEX (ix_archive_membership_barriers_scope_state)' : '';
    const read = (f: string) =>
      `SELECT operation_id FROM archive_membership_barriers ${f} WHERE scope_workspace_id = ? AND state = 'active'
        ORDER BY operation_id ${DIALECT === 'postgres' ? 'FOR SHARE' : 'LOCK IN SHARE MODE'}`;
    const hold = 'SELECT operation_id FROM archive_membership_barriers WHERE operation_id = ? FOR UPDATE';
    expect(await runsBeside(hold, [ops[0]], read(force), [scopes[1]])).toBe(true);
    if (DIALECT === 'mysql') {
      // Without the index (before migration 11) the read scans every barrier and waits on the other's.
      const scan = read('IGNORE INDEX (ix_archive_membership_barriers_scope_state)');
      expect(await runsBeside(hold, [ops[0]], scan, [scopes[1]])).toBe(false);
    }
  });
});
