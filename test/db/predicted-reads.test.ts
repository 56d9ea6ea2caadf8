/**
 * Reads answered by prediction and proved before COMMIT (`Tx.predict`,
 * src/db/predicted-reads.ts, ADR 0033): a predicted read is answered at once
 * and its lock and fence travel with COMMIT, so a body whose every read was
 * predicted commits in one round trip; a read not as predicted fails its fence
 * and nothing commits; a body that ends without writes still proves what it
 * read; the first write ends the predictions. `valueFence` compares multisets
 * of rows, NULLs and bytes. `recordAnswers` keeps the latest answer of every
 * SELECT under its plain form and drops what a write may have changed.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { plainKey, valueFence, type Predictions } from '../../src/db/predicted-reads';
import { runTransaction, type Tx } from '../../src/db/tx';
import { countRoundTrips } from '../support/round-trips';
import { sql, useTestDb } from '../support/db';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const NAME = 'SELECT name, state FROM workspaces WHERE id = ?';
const NAME_LOCK = `${NAME} FOR UPDATE`;

async function workspace(name: string): Promise<string> {
  const id = randomUUID();
  await sql(
    t.db,
    "INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', CURRENT_TIMESTAMP(3), CURRENT_TIMESTAMP(3))",
    [id, name],
  );
  return id;
}

const nameOf = async (id: string) =>
  (await sql<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ?', [id]))[0]?.name;

class Missed extends Error {}

/** Runs `fn` predicting `predictions` (a miss throws `Missed`, not a restart); its result and round trips. */
async function predicted(predictions: Predictions, fn: (tx: Tx) => Promise<unknown>) {
  await runTransaction(t.db, 'PredictWarm', (tx) => tx.rows('SELECT 1 AS one'));
  const trips = countRoundTrips(t.db);
  try {
    const result = await runTransaction(t.db, 'PredictTest', (tx) => {
      tx.predict(predictions, () => new Missed('not as predicted'));
      return fn(tx);
    });
    return { result, calls: trips.calls, texts: trips.texts };
  } finally {
    vi.restoreAllMocks();
  }
}

/** The rows a fence answers for this read and prediction, in a transaction of its own. */
async function fenceRows(read: { sql: string; params: string[] }, rows: Record<string, unknown>[]) {
  const fence = valueFence(t.db.dialect, read, rows)!;
  return runTransaction(t.db, 'FenceTest', (tx) => tx.rows(fence.sql, [...fence.params]));
}

describe('reads answered by prediction', () => {
  it('answers a predicted read at once; its lock, fence and the writes commit in one round trip', async () => {
    const id = await workspace('predicted');
    const other = await workspace('other');
    const p = new Map([[plainKey(NAME, [id])!, [{ name: 'predicted', state: 'active' }]]]);
    const out = await predicted(p, async (tx) => {
      const rows = await tx.rows(NAME_LOCK, [id]);
      void tx.commitWith([{ sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['written', other] }]);
      return rows;
    });
    expect(out.result).toEqual([{ name: 'predicted', state: 'active' }]);
    expect(out.calls).toBe(1);
    // The lock itself went too, in the same round trip.
    expect(out.texts.join(' ')).toMatch(/FOR UPDATE/);
    expect(await nameOf(other)).toBe('written');
  });

  it('a read that is not as predicted fails its fence: nothing commits', async () => {
    const id = await workspace('stored');
    const other = await workspace('other');
    const p = new Map([[plainKey(NAME, [id])!, [{ name: 'predicted', state: 'active' }]]]);
    await expect(
      predicted(p, async (tx) => {
        await tx.rows(NAME, [id]);
        void tx.commitWith([{ sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['written', other] }]);
      }),
    ).rejects.toBeInstanceOf(Missed);
    expect(await nameOf(other)).toBe('other');
  });

  it('a body that ends without writes still proves what it read', async () => {
    const id = await workspace('stored');
    const wrong = new Map([[plainKey(NAME, [id])!, [{ name: 'predicted', state: 'active' }]]]);
    await expect(predicted(wrong, (tx) => tx.rows(NAME_LOCK, [id]))).rejects.toBeInstanceOf(Missed);
    const right = new Map([[plainKey(NAME, [id])!, [{ name: 'stored', state: 'active' }]]]);
    const out = await predicted(right, (tx) => tx.rows(NAME_LOCK, [id]));
    expect(out.result).toEqual([{ name: 'stored', state: 'active' }]);
    expect(out.calls).toBe(1);
  });

  it('the first write ends the predictions: a read after it is sent and sees the write', async () => {
    const id = await workspace('stored');
    const p = new Map([[plainKey(NAME, [id])!, [{ name: 'stored', state: 'active' }]]]);
    const out = await predicted(p, async (tx) => {
      await tx.exec('UPDATE workspaces SET name = ? WHERE id = ?', ['changed', id]);
      return tx.rows(NAME, [id]);
    });
    expect(out.result).toEqual([{ name: 'changed', state: 'active' }]);
  });

  it('a fence compares the rows as a multiset, NULLs included, and a prediction of none', async () => {
    const a = await workspace('a');
    const b = await workspace('b');
    const two = { sql: 'SELECT name FROM workspaces WHERE id IN (?, ?)', params: [a, b] };
    expect(await fenceRows(two, [{ name: 'a' }, { name: 'b' }])).toHaveLength(1);
    expect(await fenceRows(two, [{ name: 'b' }, { name: 'a' }])).toHaveLength(1);
    expect(await fenceRows(two, [{ name: 'a' }, { name: 'a' }])).toHaveLength(0);
    expect(await fenceRows(two, [{ name: 'a' }])).toHaveLength(0);
    expect(await fenceRows(two, [{ name: 'a' }, { name: 'b' }, { name: 'b' }])).toHaveLength(0);
    const none = { sql: 'SELECT name FROM workspaces WHERE id = ?', params: [randomUUID()] };
    expect(await fenceRows(none, [])).toHaveLength(1);
    expect(await fenceRows({ ...none, params: [a] }, [])).toHaveLength(0);
    const nulls = { sql: 'SELECT name, NULL AS nothing FROM workspaces WHERE id = ?', params: [a] };
    expect(await fenceRows(nulls, [{ name: 'a', nothing: null }])).toHaveLength(1);
    expect(await fenceRows(nulls, [{ name: 'a', nothing: 'x' }])).toHaveLength(0);
    // Bytes, not collation: a trailing space or another case is another value.
    expect(await fenceRows({ ...none, params: [a] }, [{ name: 'a ' }])).toHaveLength(0);
    expect(await fenceRows({ ...none, params: [a] }, [{ name: 'A' }])).toHaveLength(0);
    // What SQL cannot compare by value is not fenced.
    expect(valueFence(t.db.dialect, none, [{ name: new Date() }])).toBeNull();
    expect(valueFence(t.db.dialect, { ...none, sql: `${none.sql} FOR UPDATE` }, [])).toBeNull();
  });

  it('records the latest answer of every SELECT under its plain form; a write drops what it may change', async () => {
    const id = await workspace('recorded');
    const answers = await runTransaction(t.db, 'RecordTest', async (tx) => {
      tx.recordAnswers();
      await tx.rows(NAME_LOCK, [id]);
      await tx.rows('SELECT id FROM workflows WHERE workspace_id = ?', [id]);
      const before = tx.recordedAnswers()!.snapshot();
      await tx.exec('UPDATE workflows SET name = name WHERE workspace_id = ?', [id]);
      return { before: await before.settled(), after: await tx.recordedAnswers()!.settled() };
    });
    const lock = plainKey(NAME, [id])!;
    const flows = plainKey('SELECT id FROM workflows WHERE workspace_id = ?', [id])!;
    expect(answers.before.get(lock)).toEqual([{ name: 'recorded', state: 'active' }]);
    expect(answers.before.has(flows)).toBe(true);
    expect(answers.after.get(lock)).toEqual([{ name: 'recorded', state: 'active' }]);
    expect(answers.after.has(flows)).toBe(false);
  });
});
