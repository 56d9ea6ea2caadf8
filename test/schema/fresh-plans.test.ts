/**
 * Plans on fresh tables. A new deployment's tables grow for a while before
 * autovacuum's first ANALYZE: PostgreSQL then plans with default guesses.
 * The read that every Complete's delivery pass makes
 * (`operationEventsStatement`: one operation's undelivered events) must use
 * the index that starts with the operation, not intersect the workspace's
 * whole outbox with every undelivered event, a scan that grew with the
 * outbox (0.7 ms per creation at 1,000 events, 2.5 ms at 3,000). Run on a
 * scratch database of its own (`taskledger_test_plans_<dialect>`), migrated
 * and filled here, never analyzed.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recreateDatabase } from '../../src/db/admin';
import { dbConfigFromEnv } from '../../src/db/config';
import { operationEventsStatement } from '../../src/store/outbox-mark';
import { DIALECT, openDataSource } from './helpers';

const scratchUrl = (() => {
  const u = new URL(dbConfigFromEnv().url);
  u.pathname = `/taskledger_test_plans_${DIALECT}`;
  return u.toString();
})();

const EVENTS = 2000;
const WORKSPACE = randomUUID();
const operations: string[] = [];

/** The statement's `?` placeholders in the dialect's own form. */
function dialectSql(sql: string): string {
  let i = 0;
  return DIALECT === 'postgres' ? sql.replace(/\?/g, () => `$${++i}`) : sql;
}

/** The names of the indexes a plan of `sql` reads event_outbox through. */
async function outboxIndexes(ds: DataSource, sql: string, params: readonly unknown[]): Promise<string[]> {
  if (DIALECT === 'postgres') {
    const rows = (await ds.query(`EXPLAIN (FORMAT JSON) ${dialectSql(sql)}`, [...params])) as {
      'QUERY PLAN': unknown;
    }[];
    const names: string[] = [];
    const walk = (node: Record<string, unknown>) => {
      if (typeof node['Index Name'] === 'string' && String(node['Index Name']).includes('event_outbox'))
        names.push(String(node['Index Name']));
      for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    const plan = rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[];
    walk(plan[0]!.Plan);
    return names;
  }
  const rows = (await ds.query(`EXPLAIN ${sql}`, [...params])) as { table: string; key: string | null }[];
  return rows.filter((r) => r.table === 'e').map((r) => r.key ?? '(full scan)');
}

let ds: DataSource;

beforeAll(async () => {
  await recreateDatabase(scratchUrl);
  ds = await openDataSource(scratchUrl);
  await ds.runMigrations({ transaction: 'each' });
  // One workspace's outbox: each operation's task.created, all delivered but the last 50.
  const now = DIALECT === 'postgres' ? 'clock_timestamp()' : 'NOW(3)';
  for (let start = 0; start < EVENTS; start += 250) {
    const values: string[] = [];
    const params: unknown[] = [];
    for (let i = start; i < Math.min(EVENTS, start + 250); i++) {
      const op = randomUUID();
      operations.push(op);
      const delivered = i < EVENTS - 50 ? now : 'NULL';
      const base = params.length;
      const p = (k: number) => (DIALECT === 'postgres' ? `$${base + k}` : '?');
      values.push(`(${p(1)}, ${p(2)}, ${p(3)}, 1, 'task.created', ${p(4)}, '{}', ${p(5)}, ${now}, ${delivered}, 0)`);
      params.push(randomUUID(), WORKSPACE, randomUUID(), op, 'a'.repeat(64));
    }
    await ds.query(
      `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json,
         payload_sha256, created_at, delivered_at, delivery_attempts) VALUES ${values.join(', ')}`,
      params,
    );
  }
}, 120_000);

afterAll(async () => {
  await ds?.destroy();
});

describe(`plans on fresh tables (${DIALECT})`, () => {
  it("one operation's undelivered events are read through the index that starts with the operation", async () => {
    for (const op of [operations[10]!, operations[EVENTS - 1]!]) {
      const st = operationEventsStatement(WORKSPACE, op);
      expect(await outboxIndexes(ds, st.sql, st.params)).toEqual(['ix_event_outbox_operation_workspace_seq']);
    }
  });

  it('the read still finds exactly the undelivered events of that operation', async () => {
    const st = operationEventsStatement(WORKSPACE, operations[EVENTS - 1]!);
    const rows = (await ds.query(dialectSql(st.sql), [...st.params])) as {
      operation_id: string;
      delivered_at: unknown;
    }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]!.operation_id).toBe(operations[EVENTS - 1]);
    expect(rows[0]!.delivered_at).toBeNull();
    const delivered = operationEventsStatement(WORKSPACE, operations[10]!);
    expect(await ds.query(dialectSql(delivered.sql), [...delivered.params])).toEqual([]);
  });
});
