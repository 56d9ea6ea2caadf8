/**
 * Keys with real inserts: every primary key and named UNIQUE constraint
 * rejects a duplicate; the byte-exact external ID (case, trailing space,
 * many NULLs, exact lookup); one revision-one event per task; the step key;
 * and both foreign keys.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPECTED_TABLES } from './expected-schema';
import {
  DIALECT,
  expectRejected,
  insertRow,
  insertValid,
  openDataSource,
  pkName,
  selectWhere,
  validRow,
} from './helpers';

let ds: DataSource;

beforeAll(async () => {
  ds = await openDataSource();
});

afterAll(async () => {
  await ds?.destroy();
});

/** Copies `columns` of `row` into a fresh valid row, inserts it (parents reused). */
function duplicateOf(table: string, row: Record<string, unknown>, columns: string[]) {
  const parents: Record<string, unknown> = {};
  if (table === 'tasks') parents.workspace_id = row.workspace_id;
  if (table === 'task_creation_steps') parents.operation_id = row.operation_id;
  const copy = Object.fromEntries(columns.map((c) => [c, row[c]]));
  return insertValid(ds, table, { ...parents, ...copy });
}

const KEYS = EXPECTED_TABLES.flatMap((t) => {
  const out: [string, string, string, string[]][] = [];
  if (t.primaryKey[0] !== 'seq') out.push([`${t.name} primary key`, t.name, pkName(t.name), t.primaryKey]);
  for (const [name, cols] of Object.entries(t.uniques)) out.push([name, t.name, name, cols]);
  return out;
});

describe(`unique keys reject duplicates (${DIALECT})`, () => {
  it.each(KEYS)('%s', async (_label, table, constraint, columns) => {
    const first = await insertValid(ds, table, table === 'tasks' ? { external_id: `x-${randomUUID()}` } : {});
    await expectRejected(duplicateOf(table, first, columns), constraint);
    // The same key with one column changed is accepted.
    const changed = columns[columns.length - 1]!;
    const was = first[changed];
    const other = typeof was === 'number' ? was + 1 : (validRow(table)[changed] ?? `x-${randomUUID()}`);
    const second = await duplicateOf(table, { ...first, [changed]: other }, columns);
    expect(second[changed]).not.toEqual(first[changed]);
  });
});

describe(`uq_tasks_workspace_external_id is byte-exact (${DIALECT})`, () => {
  async function workspace(): Promise<string> {
    const w = await insertValid(ds, 'workspaces');
    return w.id as string;
  }
  const task = (workspace_id: string, external_id: string | null) =>
    insertValid(ds, 'tasks', { workspace_id, external_id });

  it('rejects a duplicate in the same workspace and allows it in another', async () => {
    const ws = await workspace();
    await task(ws, 'PROJ-1');
    await expectRejected(task(ws, 'PROJ-1'), 'uq_tasks_workspace_external_id');
    await task(await workspace(), 'PROJ-1');
  });

  it('allows many tasks without an external ID in one workspace', async () => {
    const ws = await workspace();
    for (let i = 0; i < 3; i++) await task(ws, null);
    const rows = (await ds.query(
      `SELECT count(*) AS n FROM tasks WHERE workspace_id = ${DIALECT === 'postgres' ? '$1' : '?'} AND external_id IS NULL`,
      [ws],
    )) as { n: string | number }[];
    expect(Number(rows[0]!.n)).toBe(3);
  });

  it("keeps 'Abc' and 'abc' apart", async () => {
    const ws = await workspace();
    await task(ws, 'Abc');
    await task(ws, 'abc');
    const found = await selectWhere(ds, 'tasks', { workspace_id: ws, external_id: 'abc' });
    expect(found.map((r) => r.external_id)).toEqual(['abc']);
  });

  it("keeps 'a' and 'a ' apart (no pad) and looks 'a' up exactly", async () => {
    const ws = await workspace();
    await task(ws, 'a ');
    expect(await selectWhere(ds, 'tasks', { workspace_id: ws, external_id: 'a' })).toHaveLength(0);
    await task(ws, 'a');
    const exact = await selectWhere(ds, 'tasks', { workspace_id: ws, external_id: 'a' });
    expect(exact.map((r) => r.external_id)).toEqual(['a']);
    const spaced = await selectWhere(ds, 'tasks', { workspace_id: ws, external_id: 'a ' });
    expect(spaced.map((r) => r.external_id)).toEqual(['a ']);
    await expectRejected(task(ws, 'a '), 'uq_tasks_workspace_external_id');
  });

  it('stores non-ASCII IDs byte-exactly (composed and decomposed é differ)', async () => {
    const ws = await workspace();
    await task(ws, 'caf\u00e9');
    await task(ws, 'cafe\u0301');
    const found = await selectWhere(ds, 'tasks', { workspace_id: ws, external_id: 'caf\u00e9' });
    expect(found.map((r) => r.external_id)).toEqual(['caf\u00e9']);
  });
});

describe(`uq_event_outbox_task_revision (${DIALECT})`, () => {
  it('rejects a second revision-one event for a task, even of another type', async () => {
    const task_id = randomUUID();
    await insertValid(ds, 'event_outbox', { task_id, revision: 1, type: 'task.created' });
    await expectRejected(
      insertValid(ds, 'event_outbox', { task_id, revision: 1, type: 'task.created' }),
      'uq_event_outbox_task_revision',
    );
    await expectRejected(
      insertValid(ds, 'event_outbox', { task_id, revision: 1, type: 'task.deleted' }),
      'uq_event_outbox_task_revision',
    );
    await insertValid(ds, 'event_outbox', { task_id, revision: 2, type: 'task.deleted' });
  });

  it('assigns increasing seq values from the database', async () => {
    const a = randomUUID();
    const b = randomUUID();
    await insertValid(ds, 'event_outbox', { event_id: a });
    await insertValid(ds, 'event_outbox', { event_id: b });
    const [ra] = await selectWhere(ds, 'event_outbox', { event_id: a });
    const [rb] = await selectWhere(ds, 'event_outbox', { event_id: b });
    expect(BigInt(String(rb!.seq))).toBeGreaterThan(BigInt(String(ra!.seq)));
  });
});

describe(`uq_task_creation_steps_key (${DIALECT})`, () => {
  it('rejects the same (operation, kind, step_key) and allows another kind or key', async () => {
    const first = await insertValid(ds, 'task_creation_steps', { step_key: 'repo:0' });
    const same = { operation_id: first.operation_id, kind: first.kind, step_key: 'repo:0' };
    await expectRejected(insertValid(ds, 'task_creation_steps', same), 'uq_task_creation_steps_key');
    await insertValid(ds, 'task_creation_steps', { ...same, step_key: 'repo:1' });
    await insertValid(ds, 'task_creation_steps', { ...same, kind: 'session_prepare' });
  });
});

describe(`foreign keys (${DIALECT})`, () => {
  it('fk_tasks_workspace rejects a task of an unknown workspace', async () => {
    await expectRejected(insertRow(ds, 'tasks', validRow('tasks')), 'fk_tasks_workspace');
  });

  it('fk_task_creation_steps_operation rejects a step of an unknown operation', async () => {
    await expectRejected(
      insertRow(ds, 'task_creation_steps', validRow('task_creation_steps')),
      'fk_task_creation_steps_operation',
    );
  });

  it('fk_tasks_workspace refuses to delete a workspace that still has tasks', async () => {
    const t = await insertValid(ds, 'tasks');
    const p = DIALECT === 'postgres' ? '$1' : '?';
    await expectRejected(ds.query(`DELETE FROM workspaces WHERE id = ${p}`, [t.workspace_id]), 'fk_tasks_workspace');
  });
});
