/**
 * Reads sent early (`Tx.readEarly`, src/db/early-reads.ts, ADR 0026): a
 * plain read sent before it is asked for answers the same statement issued
 * later without a round trip of its own; a write of the transaction to a
 * table it reads, issued in between, drops it (the statement is sent again
 * and sees the write); a write to another table keeps it; a statement kept
 * twice answers twice; only plain reads may go early.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EarlyReads, isPlainRead } from '../../src/db/early-reads';
import { runTransaction, type Tx } from '../../src/db/tx';
import { countRoundTrips } from '../support/round-trips';
import { sql, useTestDb } from '../support/db';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const NAME = 'SELECT name FROM workspaces WHERE id = ?';

async function workspace(name: string): Promise<string> {
  const id = randomUUID();
  await sql(
    t.db,
    "INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', CURRENT_TIMESTAMP(3), CURRENT_TIMESTAMP(3))",
    [id, name],
  );
  return id;
}

/** Runs `fn` in a transaction; the round trips it made, COMMIT's included. */
async function tripsOf(fn: (tx: Tx) => Promise<unknown>): Promise<{ calls: number; result: unknown }> {
  // A connection the pool opens costs a round trip of its own (its session set-up): open one first.
  await runTransaction(t.db, 'EarlyReadsWarm', (tx) => tx.rows('SELECT 1 AS one'));
  const trips = countRoundTrips(t.db);
  const result = await runTransaction(t.db, 'EarlyReadsTest', fn);
  const calls = trips.calls;
  vi.restoreAllMocks();
  return { calls, result };
}

describe('reads sent early', () => {
  it('answers the same statement issued later with no round trip of its own', async () => {
    const id = await workspace('early');
    const other = randomUUID();
    const sent = await tripsOf(async (tx) => {
      tx.readEarly([{ sql: NAME, params: [id] }]);
      await tx.rows('SELECT id FROM workspaces WHERE id = ?', [other]);
      return tx.rows(NAME, [id]);
    });
    expect(sent.result).toEqual([{ name: 'early' }]);
    // One round trip for the early read and the other read, one for COMMIT.
    expect(sent.calls).toBe(2);
    // Without the early read, the read is a round trip of its own.
    const plain = await tripsOf(async (tx) => {
      await tx.rows('SELECT id FROM workspaces WHERE id = ?', [other]);
      return tx.rows(NAME, [id]);
    });
    expect(plain.result).toEqual([{ name: 'early' }]);
    expect(plain.calls).toBe(3);
  });

  it('a write to a table it reads drops it: the read is sent again and sees the write', async () => {
    const id = await workspace('before');
    const { result, calls } = await tripsOf(async (tx) => {
      tx.readEarly([{ sql: NAME, params: [id] }]);
      await tx.exec('UPDATE workspaces SET name = ? WHERE id = ?', [`after`, id]);
      return tx.rows(NAME, [id]);
    });
    expect(result).toEqual([{ name: 'after' }]);
    expect(calls).toBe(3);
  });

  it('a write checked later (`expect`) drops it too', async () => {
    const id = await workspace('before');
    const { result } = await tripsOf(async (tx) => {
      tx.readEarly([{ sql: NAME, params: [id] }]);
      tx.expect({ sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['expected', id] }, 1, () => {
        return new Error('no row');
      });
      return tx.rows(NAME, [id]);
    });
    expect(result).toEqual([{ name: 'expected' }]);
  });

  it('a write to another table keeps it; a statement kept twice answers twice', async () => {
    const id = await workspace('kept');
    const { result, calls } = await tripsOf(async (tx) => {
      tx.readEarly([
        { sql: NAME, params: [id] },
        { sql: NAME, params: [id] },
      ]);
      await tx.exec('UPDATE workflows SET name = name WHERE id = ?', [randomUUID()]);
      return Promise.all([tx.rows(NAME, [id]), tx.rows(NAME, [id])]);
    });
    expect(result).toEqual([[{ name: 'kept' }], [{ name: 'kept' }]]);
    // The early reads with the update (issued in the same turn), then COMMIT: the two reads made no round trip.
    expect(calls).toBe(2);
  });

  it('only plain reads go early; what names no table it writes drops every kept read', () => {
    expect(isPlainRead(NAME)).toBe(true);
    for (const sqlText of [
      'SELECT name FROM workspaces WHERE id = ? FOR UPDATE',
      'SELECT name FROM workspaces WHERE id = ? LOCK IN SHARE MODE',
      'SELECT pg_advisory_xact_lock(1)',
      'UPDATE workspaces SET name = ?',
      'WITH x AS (UPDATE workspaces SET name = ? RETURNING id) SELECT id FROM x',
    ]) {
      expect(isPlainRead(sqlText)).toBe(false);
      expect(() => new EarlyReads().keep(sqlText, sqlText, Promise.resolve({ rows: [], affected: 0 }))).toThrow(
        /only a plain read/,
      );
    }
    const early = new EarlyReads();
    const answer = Promise.resolve({ rows: [], affected: 0 });
    early.keep(NAME, 'a', answer);
    early.keep('SELECT id FROM workflows w JOIN workflow_steps s ON s.workflow_id = w.id', 'b', answer);
    early.issued('SELECT 1 FROM workspaces FOR UPDATE');
    expect(early.size).toBe(2);
    early.issued('INSERT INTO workflow_steps (id) VALUES (?)');
    expect(early.size).toBe(1);
    early.issued('SAVEPOINT x');
    expect(early.size).toBe(0);
  });
});

describe('answers kept for a later re-read (Tx.keepAnswers, ADR 0030)', () => {
  it('answers a re-read inside answerFromKept with no round trip; the latest answer, dropped by a write', async () => {
    const id = await workspace('kept');
    const other = await workspace('other');
    const { calls, result } = await tripsOf(async (tx) => {
      tx.keepAnswers();
      await tx.rows(NAME, [id]);
      await tx.rows(NAME, [other]);
      // A write to another table keeps them; the re-reads then make no round trip.
      await tx.exec('UPDATE api_tokens SET revision = revision WHERE id = ?', [randomUUID()]);
      const again = await tx.answerFromKept(() => Promise.all([tx.rows(NAME, [id]), tx.rows(NAME, [other])]));
      return again;
    });
    expect(result).toEqual([[{ name: 'kept' }], [{ name: 'other' }]]);
    // Three statements one at a time, then COMMIT: the two re-reads were answered from the kept answers.
    expect(calls).toBe(4);
  });

  it('a write of the transaction to the table drops the answer: the re-read is sent and sees the write', async () => {
    const id = await workspace('before');
    const { calls, result } = await tripsOf(async (tx) => {
      tx.keepAnswers();
      await tx.rows(NAME, [id]);
      await tx.exec('UPDATE workspaces SET name = ? WHERE id = ?', ['after', id]);
      return tx.answerFromKept(() => tx.rows(NAME, [id]));
    });
    expect(result).toEqual([{ name: 'after' }]);
    expect(calls).toBe(4);
  });

  it('outside answerFromKept, or without keepAnswers, every read goes to the server', async () => {
    const id = await workspace('sent');
    const outside = await tripsOf(async (tx) => {
      tx.keepAnswers();
      await tx.rows(NAME, [id]);
      return tx.rows(NAME, [id]);
    });
    expect(outside.calls).toBe(3);
    const without = await tripsOf(async (tx) => {
      await tx.rows(NAME, [id]);
      return tx.answerFromKept(() => tx.rows(NAME, [id]));
    });
    expect(without.calls).toBe(3);
    expect(without.result).toEqual([{ name: 'sent' }]);
  });

  it('keeps the latest answer: a read sent again after a write replaces the one before it', async () => {
    const id = await workspace('one');
    const { result } = await tripsOf(async (tx) => {
      tx.keepAnswers();
      await tx.rows(NAME, [id]);
      await tx.exec('UPDATE workspaces SET name = ? WHERE id = ?', ['two', id]);
      await tx.rows(NAME, [id]);
      return tx.answerFromKept(() => tx.rows(NAME, [id]));
    });
    expect(result).toEqual([{ name: 'two' }]);
  });
});
