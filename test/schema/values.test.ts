/**
 * Stored values with real inserts: every documented default is applied when
 * the column is omitted (created_at/updated_at from the database clock, in
 * UTC), timestamps keep milliseconds, documents hold more than 64 KiB, and
 * hashes and UUIDs round-trip unchanged.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPECTED_TABLES, type ExpectedColumn } from './expected-schema';
import { DIALECT, insertValid, openDataSource, selectWhere, sha } from './helpers';

let ds: DataSource;

beforeAll(async () => {
  ds = await openDataSource();
});

afterAll(async () => {
  await ds?.destroy();
});

function keyOf(table: string, row: Record<string, unknown>): Record<string, unknown> {
  if (table === 'event_outbox') return { event_id: row.event_id };
  const spec = EXPECTED_TABLES.find((t) => t.name === table)!;
  return Object.fromEntries(spec.primaryKey.map((c) => [c, row[c]]));
}

function expectDefault(col: ExpectedColumn, value: unknown, before: number): void {
  const label = `${col.name} default`;
  if (col.default === 'now') {
    expect(value, label).toBeInstanceOf(Date);
    // From the database clock, read back as UTC: within a minute of the test's clock.
    const ms = (value as Date).getTime();
    expect(Math.abs(ms - before), label).toBeLessThan(60_000);
  } else if (col.type === 'bool') {
    expect(value === true || value === 1, label).toBe(col.default === 'true');
  } else if (col.type === 'int') {
    expect(Number(value), label).toBe(Number(col.default));
  } else {
    expect(value, label).toBe(col.default);
  }
}

const WITH_DEFAULTS = EXPECTED_TABLES.filter((t) => t.columns.some((c) => c.default !== undefined)).map(
  (t) => [t.name, t] as const,
);

describe(`column defaults (${DIALECT})`, () => {
  it.each(WITH_DEFAULTS)('%s fills every omitted default', async (name, table) => {
    const before = Date.now();
    const row = await insertValid(ds, name);
    const [stored] = await selectWhere(ds, name, keyOf(name, row));
    expect(stored).toBeDefined();
    for (const col of table.columns.filter((c) => c.default !== undefined)) {
      expect(Object.keys(row)).not.toContain(col.name);
      expectDefault(col, stored![col.name], before);
    }
  });

  it('leaves nullable columns NULL when omitted', async () => {
    const row = await insertValid(ds, 'task_creation_operations');
    const [stored] = await selectWhere(ds, 'task_creation_operations', { id: row.id });
    for (const col of ['lease_owner', 'recovery_action', 'result_outcome', 'error_json', 'completed_at']) {
      expect(stored![col], col).toBeNull();
    }
  });
});

describe(`stored values (${DIALECT})`, () => {
  it('keeps milliseconds of a timestamp', async () => {
    const at = new Date('2026-03-04T05:06:07.891Z');
    const row = await insertValid(ds, 'task_creation_steps', { lease_expires_at: at, next_attempt_at: at });
    const [stored] = await selectWhere(ds, 'task_creation_steps', { id: row.id });
    expect((stored!.lease_expires_at as Date).toISOString()).toBe('2026-03-04T05:06:07.891Z');
    expect((stored!.next_attempt_at as Date).getTime()).toBe(at.getTime());
  });

  it('holds a document larger than 64 KiB byte for byte', async () => {
    const big = JSON.stringify({ blob: 'é'.repeat(70_000), z: '\u{1F600}' });
    const row = await insertValid(ds, 'task_creation_operations', { plan_json: big });
    const [stored] = await selectWhere(ds, 'task_creation_operations', { id: row.id });
    expect(stored!.plan_json).toBe(big);
  });

  it('round-trips lowercase hex hashes and UUIDs unchanged', async () => {
    const id = randomUUID();
    const h = sha();
    await insertValid(ds, 'lock_keys', { key_hash: h });
    const [lock] = await selectWhere(ds, 'lock_keys', { key_hash: h });
    expect(lock!.key_hash).toBe(h);
    await insertValid(ds, 'workspaces', { id });
    const [ws] = await selectWhere(ds, 'workspaces', { id });
    expect(ws!.id).toBe(id);
  });

  it('stores an attachment size beyond 32 bits', async () => {
    const row = await insertValid(ds, 'task_message_attachments', { size: '5000000000' });
    const [stored] = await selectWhere(ds, 'task_message_attachments', { id: row.id });
    expect(String(stored!.size)).toBe('5000000000');
  });
});
