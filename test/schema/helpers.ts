/**
 * Shared helpers of the schema tests: the per-project DataSource, raw inserts
 * with dialect placeholders, a valid-row builder driven by expected-schema.ts
 * (random UUIDs, so parallel files never collide) and rejection assertions.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { expect } from 'vitest';
import { dbConfigFromEnv } from '../../src/db/config';
import { createDataSource } from '../../src/db/data-source';
import { type ExpectedColumn, type ExpectedTable, expectedTable } from './expected-schema';

export type Row = Record<string, unknown>;

export const DIALECT = dbConfigFromEnv().dialect;

export async function openDataSource(url?: string): Promise<DataSource> {
  const config = url ? { url, dialect: DIALECT } : dbConfigFromEnv();
  const ds = createDataSource(config, { poolSize: 3 });
  await ds.initialize();
  return ds;
}

/** `mariadb` or `mysql` (MySQL 8) on the MySQL project; `postgres` otherwise. */
export async function flavorOf(ds: DataSource): Promise<'postgres' | 'mariadb' | 'mysql'> {
  if (DIALECT === 'postgres') return 'postgres';
  const rows = (await ds.query('SELECT VERSION() AS v')) as { v: string }[];
  return /mariadb/i.test(rows[0]?.v ?? '') ? 'mariadb' : 'mysql';
}

export function q(name: string): string {
  return DIALECT === 'postgres' ? `"${name}"` : `\`${name}\``;
}

/** Placeholder for the i-th (0-based) parameter. */
export function ph(i: number): string {
  return DIALECT === 'postgres' ? `$${i + 1}` : '?';
}

export async function insertRow(ds: DataSource, table: string, row: Row): Promise<void> {
  const cols = Object.keys(row);
  const sql = `INSERT INTO ${q(table)} (${cols.map(q).join(', ')}) VALUES (${cols.map((_, i) => ph(i)).join(', ')})`;
  await ds.query(sql, Object.values(row));
}

/** Selects rows of `table` matching every `where` column exactly (SQL `=`). */
export async function selectWhere(ds: DataSource, table: string, where: Row): Promise<Row[]> {
  const cols = Object.keys(where);
  const cond = cols.map((c, i) => `${q(c)} = ${ph(i)}`).join(' AND ');
  return (await ds.query(`SELECT * FROM ${q(table)} WHERE ${cond}`, Object.values(where))) as Row[];
}

export function sha(): string {
  return randomBytes(32).toString('hex');
}

function sampleValue(col: ExpectedColumn): unknown {
  const t = col.type;
  if (typeof t === 'object') return `s${randomBytes(6).toString('hex')}`.slice(0, t.str);
  switch (t) {
    case 'uuid':
      return randomUUID();
    case 'hash':
      return sha();
    case 'ts':
      return new Date();
    case 'doc':
      return '{}';
    case 'text':
      return 'free text';
    case 'exact':
      return `ext-${randomUUID()}`;
    case 'bool':
      return false;
    case 'int':
      return 1;
    case 'bigint':
      return '1';
    case 'serial':
      return undefined;
  }
}

/**
 * A valid row for `table`: every NOT NULL column without a default gets a
 * sample value (closed sets: the first allowed value), then `overrides`.
 * Columns with defaults are left out so the database fills them.
 */
export function validRow(table: string, overrides: Row = {}): Row {
  const spec: ExpectedTable = expectedTable(table);
  const row: Row = {};
  for (const col of spec.columns) {
    if (col.nullable || col.default !== undefined || col.type === 'serial') continue;
    const allowed = spec.in[col.name];
    row[col.name] = allowed ? allowed[0] : sampleValue(col);
  }
  Object.assign(row, overrides);
  if (table === 'task_creation_steps') {
    // armed/cancelled exist only for launch intents; cancelled needs the workspace-deleted disposition.
    if ((row.state === 'armed' || row.state === 'cancelled') && !('kind' in overrides)) row.kind = 'launch_intent';
    if (row.state === 'cancelled' && !('disposition' in overrides)) row.disposition = 'workspace_deleted';
  }
  return row;
}

/** Like validRow, but every column (nullable ones too, not serial) gets a sample value. */
export function fullRow(table: string): Row {
  const spec = expectedTable(table);
  const row = validRow(table);
  for (const col of spec.columns) {
    if (col.name in row || col.type === 'serial') continue;
    const allowed = spec.in[col.name];
    row[col.name] = allowed ? allowed[0] : sampleValue(col);
  }
  return row;
}

/**
 * Inserts a valid row, first inserting the parent rows its foreign keys need
 * (a workspace for a task, an operation for a step) unless overridden.
 */
export async function insertValid(ds: DataSource, table: string, overrides: Row = {}): Promise<Row> {
  const row = validRow(table, overrides);
  if (table === 'tasks' && !('workspace_id' in overrides)) {
    await insertRow(ds, 'workspaces', validRow('workspaces', { id: row.workspace_id }));
  }
  if (table === 'task_creation_steps' && !('operation_id' in overrides)) {
    await insertRow(ds, 'task_creation_operations', validRow('task_creation_operations', { id: row.operation_id }));
  }
  await insertRow(ds, table, row);
  return row;
}

/** Asserts the statement fails and that the error names `constraint`. */
export async function expectRejected(promise: Promise<unknown>, constraint: string): Promise<void> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected a violation of ${constraint}`).toBeInstanceOf(Error);
  expect((err as Error).message).toContain(constraint);
}

/** The name a duplicate primary key reports: `pk_<table>` on PostgreSQL, `PRIMARY` on MySQL. */
export function pkName(table: string): string {
  return DIALECT === 'postgres' ? `pk_${table}` : 'PRIMARY';
}
