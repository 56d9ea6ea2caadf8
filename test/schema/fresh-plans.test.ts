/**
 * Plans on fresh tables. A new deployment's tables grow for a while before
 * autovacuum's first ANALYZE: PostgreSQL then plans with default guesses.
 * The read that every Complete's delivery pass makes
 * (`operationEventsStatement`: one operation's undelivered events) must use
 * the index that starts with the operation, not intersect the workspace's
 * whole outbox with every undelivered event, a scan that grew with the
 * outbox (0.7 ms per creation at 1,000 events, 2.5 ms at 3,000). And the
 * statements that name a step by its key or id and its state (that read's
 * join to the armed launch intent, Complete's check of it) must read the
 * steps through that key, not through an index that starts with the state:
 * ~500 buffers per call after 2,000 creations, and growing; nor through
 * one that starts with the lease, which a row check's `lease_expires_at IS
 * NULL` matches for nearly every step (migration 13, ADR 0038) — as a
 * custom plan, and on PostgreSQL as the generic plan a connection's
 * prepared statement keeps. Run on a scratch database of its
 * own (`taskledger_test_plans_<dialect>`), migrated and filled here, never
 * analyzed.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recreateDatabase } from '../../src/db/admin';
import { dbConfigFromEnv } from '../../src/db/config';
import { unpromotedStartsStatement } from '../../src/runtime/deferred-retry';
import { announcedLaunchesStatement } from '../../src/runtime/sweep';
import { DEFAULT_PLACEMENT_SQL } from '../../src/store/begin-context';
import { inEventOrder, operationEventsStatement, type OperationEventRow } from '../../src/store/outbox-mark';
import { stepsLockStatement } from '../../src/store/step-rows';
import { DIALECT, openDataSource } from './helpers';

const scratchUrl = (() => {
  const u = new URL(dbConfigFromEnv().url);
  u.pathname = `/taskledger_test_plans_${DIALECT}`;
  return u.toString();
})();

const EVENTS = 2000;
/** Delivered creations left without a dispatch claim (their launch wake-up was lost). */
const UNCLAIMED = 5;
const WORKSPACE = randomUUID();
const operations: string[] = [];

/** The statement's `?` placeholders in the dialect's own form. */
function dialectSql(sql: string): string {
  let i = 0;
  return DIALECT === 'postgres' ? sql.replace(/\?/g, () => `$${++i}`) : sql;
}

/** The indexes (or `(full scan)`) each table of a PostgreSQL JSON plan is read through, by table name. */
function pgPlanIndexes(rows: { 'QUERY PLAN': unknown }[], table: string): string[] {
  const names: string[] = [];
  const walk = (node: Record<string, unknown>) => {
    if (node['Relation Name'] === table || String(node['Index Name'] ?? '').includes(table)) {
      names.push(typeof node['Index Name'] === 'string' ? node['Index Name'] : '(full scan)');
    }
    for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
  };
  const plan = rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[];
  walk(plan[0]!.Plan);
  return [...new Set(names)];
}

/** The names of the indexes a plan of `sql` reads `table` (aliased `alias`) through. */
async function planIndexes(
  ds: DataSource,
  sql: string,
  params: readonly unknown[],
  table = 'event_outbox',
  alias = 'e',
): Promise<string[]> {
  if (DIALECT === 'postgres') {
    const rows = (await ds.query(`EXPLAIN (FORMAT JSON) ${dialectSql(sql)}`, [...params])) as {
      'QUERY PLAN': unknown;
    }[];
    return pgPlanIndexes(rows, table);
  }
  const rows = (await ds.query(`EXPLAIN ${sql}`, [...params])) as { table: string; key: string | null }[];
  return rows.filter((r) => r.table === alias).map((r) => r.key ?? '(full scan)');
}

/** PostgreSQL: the indexes the generic plan of `sql` as a prepared statement reads `table` through. */
async function genericPlanIndexes(ds: DataSource, sql: string, params: readonly unknown[], table: string) {
  const qr = ds.createQueryRunner();
  try {
    await qr.query('SET plan_cache_mode = force_generic_plan');
    await qr.query(`PREPARE fresh_plan AS ${dialectSql(sql)}`);
    const literals = params.map((p) => (typeof p === 'number' ? String(p) : `'${String(p)}'`)).join(', ');
    const rows = (await qr.query(`EXPLAIN (FORMAT JSON) EXECUTE fresh_plan(${literals})`)) as {
      'QUERY PLAN': unknown;
    }[];
    await qr.query('DEALLOCATE fresh_plan');
    return pgPlanIndexes(rows, table);
  } finally {
    await qr.release();
  }
}

/** PostgreSQL: how many times an executed plan of `sql` looked up a row of `tasks`, by the server's own count. */
async function taskLookups(ds: DataSource, sql: string, params: readonly unknown[]): Promise<number> {
  const rows = (await ds.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${dialectSql(sql)}`, [...params])) as {
    'QUERY PLAN': unknown;
  }[];
  let loops = 0;
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (typeof node !== 'object' || node === null) return;
    const n = node as Record<string, unknown>;
    if (n['Relation Name'] === 'tasks') loops += Number(n['Actual Loops'] ?? 0);
    Object.values(n).forEach(walk);
  };
  walk(rows[0]!['QUERY PLAN']);
  return loops;
}

/** The form of Complete's check of an armed launch intent (src/store/launch-record.ts): a step by id, key and state. */
const INTENT_CHECK = `SELECT s.id FROM task_creation_steps s
  WHERE s.id = ? AND s.operation_id = ? AND s.kind = 'launch_intent' AND s.step_key = ?
    AND s.state = 'armed' AND s.generation = ?`;
/**
 * The form of a batch's fence on the step rows it wrote (src/store/complete-in-batch.ts): the operation's rows, each
 * one column by column (nulls as IS NULL), and the operation's count.
 */
const rowFence = (n: number) => {
  // MySQL compares the strings as bytes (`BINARY col = ?`), as the fence does.
  const str = (col: string) => (DIALECT === 'mysql' ? `BINARY s.${col} = ?` : `s.${col} = ?`);
  const row = `(${str('id')} AND ${str('operation_id')} AND ${str('kind')} AND ${str('state')} AND s.generation = ?
    AND s.lease_owner IS NULL AND s.lease_expires_at IS NULL AND s.next_attempt_at IS NULL
    AND ${str('compensation_state')} AND s.compensation_lease_owner IS NULL AND s.compensation_lease_expires_at IS NULL
    AND s.cleanup_job_id IS NULL)`;
  return `SELECT s.id FROM task_creation_steps s WHERE s.operation_id = ? AND (${Array(n).fill(row).join(' OR ')})
    AND (SELECT COUNT(*) FROM task_creation_steps c WHERE c.operation_id = ?) = ?`;
};
const STEP_KEYS = new Set(['pk_task_creation_steps', 'PRIMARY', 'uq_task_creation_steps_key']);
/** An operation read by its id, or by its task's (one creation per task): one row either way, not a state's rows. */
const OPERATION_KEYS = new Set(['pk_task_creation_operations', 'PRIMARY', 'ix_task_creation_operations_task_id']);
const steps: { id: string; operation: string; key: string }[] = [];

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
  // Each operation's armed launch intent (the steps' other rows are not what the plans are about). The operations
  // themselves are not there: the foreign key is off for this connection.
  const qr = ds.createQueryRunner();
  try {
    await qr.query(DIALECT === 'postgres' ? 'SET session_replication_role = replica' : 'SET FOREIGN_KEY_CHECKS = 0');
    for (let start = 0; start < EVENTS; start += 250) {
      const values: string[] = [];
      const params: unknown[] = [];
      for (const op of operations.slice(start, start + 250)) {
        const step = { id: randomUUID(), operation: op, key: randomUUID() };
        steps.push(step);
        const base = params.length;
        const p = (k: number) => (DIALECT === 'postgres' ? `$${base + k}` : '?');
        values.push(
          `(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, 'launch_intent', ${p(5)}, '{}', ${p(6)}, ${p(7)}, 'armed', 1)`,
        );
        params.push(step.id, op, randomUUID(), WORKSPACE, step.key, 'b'.repeat(64), 'c'.repeat(64));
      }
      await qr.query(
        `INSERT INTO task_creation_steps (id, operation_id, task_id, workspace_id, kind, step_key, request_json,
           request_sha256, idempotency_key, state, generation) VALUES ${values.join(', ')}`,
        params,
      );
    }
    // Dispatch claims for every delivered creation but the UNCLAIMED last delivered ones (their launches went out).
    const unclaimed = operations.slice(EVENTS - 50 - UNCLAIMED, EVENTS - 50);
    await qr.query(
      dialectSql(`INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id,
         state, generation, lifecycle_generation, idempotency_key, request_sha256, created_at, updated_at)
       SELECT ${DIALECT === 'postgres' ? 'gen_random_uuid()' : 'UUID()'}, e.operation_id, e.task_id,
              ${DIALECT === 'postgres' ? 'gen_random_uuid()' : 'UUID()'}, e.workspace_id, 'succeeded', 1, 1,
              CONCAT('k/', e.event_id), ?, e.created_at, e.created_at
         FROM event_outbox e
        WHERE e.delivered_at IS NOT NULL AND e.operation_id NOT IN (${unclaimed.map(() => '?').join(', ')})`),
      ['a'.repeat(64), ...unclaimed],
    );
    // The operations themselves, completed immediate starts of the one workspace (no deferred start among them).
    for (let start = 0; start < EVENTS; start += 250) {
      const values: string[] = [];
      const params: unknown[] = [];
      for (const op of operations.slice(start, start + 250)) {
        const base = params.length;
        const p = (k: number) => (DIALECT === 'postgres' ? `$${base + k}` : '?');
        values.push(`(${p(1)}, ${p(2)}, ${p(3)}, 'completed', '{}', ${p(4)}, '{}', ${p(5)}, ${p(6)}, 'immediate')`);
        params.push(op, WORKSPACE, randomUUID(), 'd'.repeat(64), 'e'.repeat(64), 'f'.repeat(64));
      }
      await qr.query(
        `INSERT INTO task_creation_operations (id, workspace_id, task_id, state, plan_json, manifest_hash, actor_json,
           actor_binding_hash, completion_token_sha256, start_policy) VALUES ${values.join(', ')}`,
        params,
      );
    }
  } finally {
    await qr.release();
  }
}, 120_000);

afterAll(async () => {
  await ds?.destroy();
});

describe(`plans on fresh tables (${DIALECT})`, () => {
  it("one operation's undelivered events are read through the index that starts with the operation", async () => {
    for (const op of [operations[10]!, operations[EVENTS - 1]!]) {
      const st = operationEventsStatement(DIALECT, WORKSPACE, op);
      expect(await planIndexes(ds, st.sql, st.params)).toEqual(['ix_event_outbox_operation_workspace_seq']);
    }
  });

  it("that read sorts nothing: the operation's index gives the events in order (no temporary table, no sort)", async () => {
    const st = operationEventsStatement(DIALECT, WORKSPACE, operations[EVENTS - 1]!);
    if (DIALECT === 'postgres') {
      const rows = (await ds.query(`EXPLAIN (FORMAT JSON) ${dialectSql(st.sql)}`, [...st.params])) as {
        'QUERY PLAN': unknown;
      }[];
      const nodes: string[] = [];
      const walk = (node: Record<string, unknown>) => {
        nodes.push(String(node['Node Type']));
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
      };
      walk((rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
      expect(nodes.length).toBeGreaterThan(1);
      expect(nodes.filter((n) => /Sort/.test(n))).toEqual([]);
    } else {
      // Sorting the join by a column of the step made MariaDB build a temporary table, on disk (the TEXT payload).
      const rows = (await ds.query(`EXPLAIN ${st.sql}`, [...st.params])) as { table: string; Extra: string | null }[];
      expect(rows.map((r) => r.table)).toContain('e');
      expect(rows.filter((r) => /temporary|filesort/i.test(r.Extra ?? ''))).toEqual([]);
      // Nor at run time: a correlated subquery for the claim's state (the event has an armed intent) made MariaDB
      // create its subquery cache, a temporary table, at every run (ADR 0047); EXPLAIN does not show that one.
      const qr = ds.createQueryRunner();
      try {
        const created = async () =>
          Number(((await qr.query("SHOW SESSION STATUS LIKE 'Created_tmp_tables'")) as { Value: string }[])[0]!.Value);
        const before = await created();
        for (let run = 0; run < 3; run++) {
          const answered = (await qr.query(st.sql, [...st.params])) as { step_key: string | null }[];
          expect(answered.map((r) => r.step_key)).toEqual([steps[EVENTS - 1]!.key]);
        }
        // None per run (SHOW STATUS may count one of its own).
        expect(await created()).toBeLessThanOrEqual(before + 1);
      } finally {
        await qr.release();
      }
    }
  });

  it("that read answers each armed intent's dispatch claim state, and null without a claim", async () => {
    const op = operations[EVENTS - 2]!;
    const step = steps[EVENTS - 2]!;
    const read = async () => {
      const st = operationEventsStatement(DIALECT, WORKSPACE, op);
      return ((await ds.query(dialectSql(st.sql), [...st.params])) as OperationEventRow[]).map((r) => [
        r.step_key,
        r.dispatch_state,
      ]);
    };
    expect(await read()).toEqual([[step.key, null]]);
    const claim = randomUUID();
    const qr = ds.createQueryRunner();
    try {
      await qr.query(DIALECT === 'postgres' ? 'SET session_replication_role = replica' : 'SET FOREIGN_KEY_CHECKS = 0');
      // Another session's claim of the same operation and task does not answer for this intent.
      const task = (
        (await qr.query(dialectSql('SELECT task_id FROM event_outbox WHERE operation_id = ?'), [op])) as {
          task_id: string;
        }[]
      )[0]!.task_id;
      const insert = (id: string, session: string, state: string) =>
        qr.query(
          dialectSql(`INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id,
             workspace_id, state, generation, lifecycle_generation, idempotency_key, request_sha256, created_at,
             updated_at) VALUES (?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ${DIALECT === 'postgres' ? 'now()' : 'NOW(3)'},
             ${DIALECT === 'postgres' ? 'now()' : 'NOW(3)'})`),
          [id, op, task, session, WORKSPACE, state, `k/${id}`, 'a'.repeat(64)],
        );
      await insert(randomUUID(), randomUUID(), 'succeeded');
      expect(await read()).toEqual([[step.key, null]]);
      await insert(claim, step.key, 'running');
      expect(await read()).toEqual([[step.key, 'running']]);
      await qr.query(dialectSql('DELETE FROM task_launch_dispatch_claims WHERE creation_operation_id = ?'), [op]);
    } finally {
      await qr.release();
    }
  });

  it("the lock of an operation's steps: in id order on PostgreSQL (locked as they leave the sort), unsorted on MySQL", async () => {
    const st = stepsLockStatement(steps[EVENTS - 3]!.operation, DIALECT);
    if (DIALECT === 'postgres') {
      const rows = (await ds.query(`EXPLAIN (FORMAT JSON) ${dialectSql(st.sql)}`, [...st.params])) as {
        'QUERY PLAN': unknown;
      }[];
      const top = (rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan;
      expect(top['Node Type']).toBe('LockRows');
      const below = (top.Plans as Record<string, unknown>[])[0]!;
      // Sorted (or read in id order) below the lock: the rows are locked in id order.
      expect(below['Node Type'] === 'Sort' ? below['Sort Key'] : below['Index Name']).toEqual(
        below['Node Type'] === 'Sort' ? ['id'] : 'pk_task_creation_steps',
      );
    } else {
      // InnoDB locks each row as the key read reaches it, before any sort: a sort by id would only cost a filesort.
      const rows = (await ds.query(`EXPLAIN ${st.sql}`, [...st.params])) as { key: string; Extra: string | null }[];
      expect(rows.map((r) => r.key)).toEqual(['uq_task_creation_steps_key']);
      expect(rows.filter((r) => /temporary|filesort/i.test(r.Extra ?? ''))).toEqual([]);
    }
    const locked = (await ds.query(dialectSql(st.sql), [...st.params])) as { id: string }[];
    expect(locked.map((r) => r.id)).toEqual([steps[EVENTS - 3]!.id]);
  });

  it("an event's intents are put in session order after the read, events in sequence order", () => {
    const row = (seq: string, step_key: string | null): OperationEventRow => ({
      seq,
      event_id: `ev-${seq}`,
      type: 'task.created',
      task_id: 't',
      operation_id: 'o',
      revision: 1,
      payload_json: '{}',
      delivered_at: null,
      step_key,
      dispatch_state: null,
    });
    const ordered = inEventOrder([row('10', 'b'), row('9', null), row('10', 'a'), row('100', 'a')]);
    expect(ordered.map((r) => `${r.seq}:${r.step_key}`)).toEqual(['9:null', '10:a', '10:b', '100:a']);
  });

  it("that read joins the operation's armed launch intent by the step's key, not by its state", async () => {
    const st = operationEventsStatement(DIALECT, WORKSPACE, operations[EVENTS - 1]!);
    const custom = await planIndexes(ds, st.sql, st.params, 'task_creation_steps', 's');
    expect(custom.length).toBeGreaterThan(0);
    expect(custom.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    if (DIALECT === 'postgres') {
      const generic = await genericPlanIndexes(ds, st.sql, st.params, 'task_creation_steps');
      expect(generic.length).toBeGreaterThan(0);
      expect(generic.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    }
    // And the intent's dispatch claim by the claim's key, never a scan of every claim (ADR 0047).
    expect(await planIndexes(ds, st.sql, st.params, 'task_launch_dispatch_claims', 'c')).toEqual([
      'uq_launch_dispatch',
    ]);
    if (DIALECT === 'postgres') {
      expect(await genericPlanIndexes(ds, st.sql, st.params, 'task_launch_dispatch_claims')).toEqual([
        'uq_launch_dispatch',
      ]);
    }
  });

  it("Complete's check of an armed intent reads that one step by its id or key", async () => {
    const step = steps[EVENTS - 1]!;
    const params = [step.id, step.operation, step.key, 1];
    const custom = await planIndexes(ds, INTENT_CHECK, params, 'task_creation_steps', 's');
    expect(custom.length).toBeGreaterThan(0);
    expect(custom.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    if (DIALECT === 'postgres') {
      const generic = await genericPlanIndexes(ds, INTENT_CHECK, params, 'task_creation_steps');
      expect(generic.length).toBeGreaterThan(0);
      expect(generic.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    }
    const rows = (await ds.query(dialectSql(INTENT_CHECK), params)) as { id: string }[];
    expect(rows.map((r) => r.id)).toEqual([step.id]);
  });

  it("a batch's fence on the rows it wrote reads them by id or key, not through the lease", async () => {
    const step = steps[EVENTS - 2]!;
    const row = (id: string) => [id, step.operation, 'launch_intent', 'armed', 1, 'none'];
    const params = [step.operation, ...row(step.id), ...row(randomUUID()), ...row(randomUUID()), step.operation, 1];
    const custom = await planIndexes(ds, rowFence(3), params, 'task_creation_steps', 's');
    expect(custom.length).toBeGreaterThan(0);
    expect(custom.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    if (DIALECT === 'postgres') {
      const generic = await genericPlanIndexes(ds, rowFence(3), params, 'task_creation_steps');
      expect(generic.length).toBeGreaterThan(0);
      expect(generic.filter((ix) => !STEP_KEYS.has(ix))).toEqual([]);
    }
    const rows = (await ds.query(dialectSql(rowFence(3)), params)) as { id: string }[];
    expect(rows.map((r) => r.id)).toEqual([step.id]);
  });

  it("the reaper's unpromoted deferred starts are read from the window's events, each operation by its id or task", async () => {
    for (const windowMs of [900_000, null]) {
      const st = unpromotedStartsStatement(DIALECT, { windowMs });
      const custom = await planIndexes(ds, st.sql, st.params, 'task_creation_operations', 'o');
      expect(custom.length).toBeGreaterThan(0);
      expect(custom.filter((ix) => !OPERATION_KEYS.has(ix))).toEqual([]);
      expect(await ds.query(dialectSql(st.sql), [...st.params])).toEqual([]);
    }
  });

  it("the launch sweep looks up only the unclaimed creations' tasks, not every announced event's", async () => {
    const st = announcedLaunchesStatement(DIALECT, { workspaceId: WORKSPACE, launchWindowMs: null });
    if (DIALECT === 'postgres') {
      // The materialized set keeps the order written: each of the window's 1,950 delivered events was looked up
      // before the claim probe came first. MariaDB merges the set into the query and orders its conditions itself
      // (ADR 0039), so the count is PostgreSQL's only; the answer below is checked on both.
      const loops = await taskLookups(ds, st.sql, st.params);
      expect(loops).toBeGreaterThan(0);
      expect(loops).toBeLessThanOrEqual(UNCLAIMED);
    }
    // No task rows here: none is launchable, so nothing is re-sent.
    expect(await ds.query(dialectSql(st.sql), [...st.params])).toEqual([]);
  });

  it("a creation's default placement reads its workspace's steps through their index, not every workspace's", async () => {
    // 300 workspaces of 5 steps in one workflow; the last one has a newer second workflow too.
    const place = randomUUID();
    const oldest = { workflow: randomUUID(), first: randomUUID() };
    const rows: { ws: string; wf: string; steps: { id: string; position: number }[]; at: string }[] = [];
    for (let i = 0; i < 300; i++) {
      const ws = i === 299 ? place : randomUUID();
      const wf = i === 299 ? oldest.workflow : randomUUID();
      const steps = [2, 0, 1, 3, 4].map((position) => ({
        id: i === 299 && position === 0 ? oldest.first : randomUUID(),
        position,
      }));
      rows.push({ ws, wf, steps, at: '2026-01-01 00:00:00' });
    }
    rows.push({ ws: place, wf: randomUUID(), steps: [{ id: randomUUID(), position: 0 }], at: '2026-02-01 00:00:00' });
    const ts = (at: string) => (DIALECT === 'postgres' ? `TIMESTAMPTZ '${at}+00'` : `'${at}'`);
    for (let start = 0; start < rows.length; start += 100) {
      const chunk = rows.slice(start, start + 100);
      await ds.query(
        `INSERT INTO workflows (id, workspace_id, name, created_at) VALUES ${chunk
          .map((r) => `('${r.wf}', '${r.ws}', 'flow', ${ts(r.at)})`)
          .join(', ')}`,
      );
      await ds.query(
        `INSERT INTO workflow_steps (id, workflow_id, workspace_id, name, position) VALUES ${chunk
          .flatMap((r) => r.steps.map((st) => `('${st.id}', '${r.wf}', '${r.ws}', 'step', ${st.position})`))
          .join(', ')}`,
      );
    }
    if (DIALECT === 'postgres') {
      // The scans of the steps' table: through the index (a bitmap heap scan of what it found, or an index scan).
      const rows = (await ds.query(`EXPLAIN (FORMAT JSON) ${dialectSql(DEFAULT_PLACEMENT_SQL)}`, [place])) as {
        'QUERY PLAN': unknown;
      }[];
      const scans: string[] = [];
      const walk = (node: Record<string, unknown>) => {
        if (node['Relation Name'] === 'workflow_steps' || node['Node Type'] === 'Bitmap Index Scan') {
          scans.push(`${String(node['Node Type'])} ${String(node['Index Name'] ?? '')}`.trim());
        }
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
      };
      walk((rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
      expect(scans.length).toBeGreaterThan(0);
      expect(scans.filter((s) => !/ix_workflow_steps_workspace|^Bitmap Heap Scan$/.test(s))).toEqual([]);
      expect(scans.some((s) => s.endsWith('ix_workflow_steps_workspace'))).toBe(true);
    } else {
      expect(await planIndexes(ds, DEFAULT_PLACEMENT_SQL, [place], 'workflow_steps', 's')).toEqual([
        'ix_workflow_steps_workspace',
      ]);
    }
    const placed = (await ds.query(dialectSql(DEFAULT_PLACEMENT_SQL), [place])) as {
      id: string;
      workflow_id: string;
    }[];
    expect(placed).toEqual([{ id: oldest.first, workflow_id: oldest.workflow }]);
  });

  it('the read still finds exactly the undelivered events of that operation', async () => {
    const st = operationEventsStatement(DIALECT, WORKSPACE, operations[EVENTS - 1]!);
    const rows = (await ds.query(dialectSql(st.sql), [...st.params])) as {
      operation_id: string;
      delivered_at: unknown;
    }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]!.operation_id).toBe(operations[EVENTS - 1]);
    expect(rows[0]!.delivered_at).toBeNull();
    const delivered = operationEventsStatement(DIALECT, WORKSPACE, operations[10]!);
    expect(await ds.query(dialectSql(delivered.sql), [...delivered.params])).toEqual([]);
  });
});
