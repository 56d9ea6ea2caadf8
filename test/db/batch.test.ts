/**
 * Several statements per round trip (src/db/batch.ts, docs/adr/0006): the
 * statements a transaction issues together run in issue order, values reach
 * the database byte for byte (PostgreSQL inlines them as literals), one
 * failing statement fails the whole transaction, a lock cannot jump ahead of
 * the locks sent ahead, and a finished transaction refuses statements. A
 * transaction's final writes travel with its COMMIT (`Tx.commitWith`): in
 * order, all or nothing, and nothing may follow them.
 */
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2';
import { describe, expect, it, vi } from 'vitest';
import { inlinePgParams } from '../../src/db/batch';
import { readRows, runTransaction, statementsIssued, type Tx } from '../../src/db/tx';
import { countRoundTrips } from '../support/round-trips';
import { insertWorkspace, sql, useTestDb } from '../support/db';

const t = useTestDb();

async function names(ids: string[]): Promise<string[]> {
  const rows = await sql<{ id: string; name: string }>(
    t.db,
    `SELECT id, name FROM workspaces WHERE id IN (${ids.map(() => '?').join(', ')})`,
    ids,
  );
  return ids.map((id) => rows.find((r) => r.id === id)?.name ?? '<absent>');
}

describe('statement batches', () => {
  it('runs statements issued together in issue order: a read after an insert sees it', async () => {
    const id = randomUUID();
    const [inserted, seen, none] = await runTransaction(t.db, 'BatchOrder', (tx) =>
      Promise.all([
        insertWorkspace(tx, id, 'ordered'),
        tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [id]),
        tx.rows('SELECT name FROM workspaces WHERE id = ?', [randomUUID()]),
      ]),
    );
    expect(inserted).toBe(1);
    expect(seen).toEqual([{ name: 'ordered' }]);
    expect(none).toEqual([]);
    expect(await names([id])).toEqual(['ordered']);
  });

  it('delivers every value byte for byte, quotes, backslashes, placeholders and all', async () => {
    const tricky = [
      "it's",
      'back\\slash \\x41',
      "'; DROP TABLE workspaces; --",
      'a ? b $1 c',
      'line\nbreak\ttab',
      'ünïcødé ✓ 漢字',
      '',
    ];
    const ids = tricky.map(() => randomUUID());
    await runTransaction(t.db, 'BatchValues', (tx) =>
      Promise.all(tricky.map((name, i) => insertWorkspace(tx, ids[i]!, name))),
    );
    expect(await names(ids)).toEqual(tricky);
  });

  it('inlines PostgreSQL literals through the driver and refuses what it cannot inline', () => {
    expect(inlinePgParams('SELECT ?, ?, ?, ?', ["o'k", 5, null, true])).toBe("SELECT 'o''k', 5, NULL, TRUE");
    expect(() => inlinePgParams('SELECT ?', [])).toThrow(/1 placeholders but 0 parameters/);
    expect(() => inlinePgParams('SELECT ?', [Number.NaN])).toThrow(TypeError);
  });

  it('binds a value it cannot inline (a Date) by falling back to one statement per round trip', async () => {
    const id = randomUUID();
    const when = new Date('2026-01-02T03:04:05.678Z');
    const [, row] = await runTransaction(t.db, 'BatchDate', (tx) =>
      Promise.all([
        tx.exec(
          "INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, 'dated', 'active', ?, ?)",
          [id, when, when],
        ),
        tx.one<{ created_at: Date }>('SELECT created_at FROM workspaces WHERE id = ?', [id]),
      ]),
    );
    expect(new Date(row!.created_at).toISOString()).toBe(when.toISOString());
  });

  it("sends MySQL statements through the driver's callback API, never its promise wrapper (a stack trace per call)", async () => {
    const wrapped = vi.spyOn(mysql.PoolConnection.prototype as unknown as { promise(): unknown }, 'promise');
    const id = randomUUID();
    const seen = await runTransaction(t.db, 'BatchCallback', async (tx) => {
      // A batch that opens the transaction, then a statement alone, then COMMIT alone.
      await Promise.all([
        insertWorkspace(tx, id, 'called back'),
        tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [id]),
      ]);
      return tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [id]);
    });
    // And a read alone, outside any transaction.
    const [alone] = await readRows<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ?', [id]);
    const calls = wrapped.mock.calls.length;
    vi.restoreAllMocks();
    expect(seen).toEqual([{ name: 'called back' }]);
    expect(alone).toEqual({ name: 'called back' });
    expect(calls).toBe(0);
  });

  it('fails the whole transaction when one statement of a batch fails: nothing commits', async () => {
    const first = randomUUID();
    const dup = randomUUID();
    await expect(
      runTransaction(t.db, 'BatchFailure', (tx) =>
        Promise.all([
          insertWorkspace(tx, first, 'one'),
          insertWorkspace(tx, dup, 'two'),
          insertWorkspace(tx, dup, 'x'),
        ]),
      ),
    ).rejects.toThrow();
    expect(await names([first, dup])).toEqual(['<absent>', '<absent>']);
  });

  it('refuses a lock that would run before the locks sent ahead, and rolls back', async () => {
    const id = randomUUID();
    await expect(
      runTransaction(t.db, 'BatchAheadOrder', async (tx) => {
        await insertWorkspace(tx, id, 'ahead');
        await tx.batchAhead(
          [{ sql: `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, params: [id] }],
          [{ sql: 'SELECT id FROM workspaces WHERE id = ? FOR UPDATE', params: [id] }],
        );
        // A plain read may run first; a lock may not.
        expect(await tx.rows('SELECT name FROM workspaces WHERE id = ?', [id])).toEqual([{ name: 'ahead' }]);
        await tx.rows('SELECT id FROM task_creation_operations WHERE id = ? FOR UPDATE', [randomUUID()]);
      }),
    ).rejects.toThrow(/runs before the lock sent ahead/);
    expect(await names([id])).toEqual(['<absent>']);
  });

  it('answers the statements sent ahead from the same round trip, in order', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'BatchAheadUse', async (tx) => {
      await insertWorkspace(tx, id, 'sent ahead');
      const [first] = await tx.batchAhead(
        [{ sql: `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, params: [id] }],
        [{ sql: 'SELECT name FROM workspaces WHERE id = ? FOR UPDATE', params: [id] }],
      );
      expect(first!.rows).toEqual([{ state: 'active' }]);
      expect(await tx.rows('SELECT name FROM workspaces WHERE id = ? FOR UPDATE', [id])).toEqual([
        { name: 'sent ahead' },
      ]);
    });
  });

  it('answers guessed statements like the ones sent ahead when the guess was right: no round trip', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'GuessRight', async (tx) => {
      await insertWorkspace(tx, id, 'guessed');
      const guess = { sql: 'SELECT name FROM workspaces WHERE id = ? FOR UPDATE', params: [id] };
      await tx.batchAhead(
        [{ sql: `SELECT state FROM workspaces WHERE id = ? ${tx.forShare}`, params: [id] }],
        [],
        [guess],
      );
      const trips = countRoundTrips(t.db);
      expect(await tx.rows(guess.sql, guess.params)).toEqual([{ name: 'guessed' }]);
      expect(trips.calls).toBe(0);
      vi.restoreAllMocks();
    });
  });

  it('restarts the command when a guess missed, whatever was issued instead; the retry guesses nothing', async () => {
    for (const instead of ['lock', 'read'] as const) {
      const id = randomUUID();
      const attempts: string[] = [];
      await runTransaction(t.db, 'GuessMissed', async (tx) => {
        const guessing = attempts.length === 0;
        attempts.push(guessing ? 'guess' : 'plain');
        await insertWorkspace(tx, id, `missed ${instead}`);
        const guess = { sql: 'SELECT id FROM workspaces WHERE id = ? FOR UPDATE', params: [randomUUID()] };
        await tx.batchAhead([{ sql: 'SELECT 1 AS one', params: [] }], [], guessing ? [guess] : []);
        const asked =
          instead === 'lock'
            ? `SELECT id FROM workspaces WHERE id = ? FOR UPDATE`
            : 'SELECT name FROM workspaces WHERE id = ?';
        await tx.rows(asked, [id]);
      });
      expect(attempts).toEqual(['guess', 'plain']);
      // The attempt that guessed rolled back; the one that did not committed once.
      expect(await names([id])).toEqual([`missed ${instead}`]);
    }
  });

  it('records the first round trip of a body without a database (statementsIssued)', async () => {
    let finished = false;
    const got = await statementsIssued(t.db.dialect, async (tx) => {
      await Promise.all([tx.rows('SELECT 1 AS one'), tx.rows('SELECT ? AS two', [2])]);
      await tx.rows('SELECT 3 AS three');
      finished = true;
    });
    expect(got).toEqual([
      { sql: 'SELECT 1 AS one', params: [] },
      { sql: 'SELECT ? AS two', params: [2] },
    ]);
    expect(finished).toBe(false);
  });

  it('never loses a transaction silently when a statement error is swallowed', async () => {
    const id = randomUUID();
    const run = runTransaction(t.db, 'SwallowedError', async (tx) => {
      await tx.rows('SELECT * FROM no_such_table').catch(() => undefined);
      // PostgreSQL has aborted the transaction: this write is refused; MySQL rolled back only the failed statement.
      await insertWorkspace(tx, id, 'after a swallowed error').catch(() => undefined);
    });
    if (t.db.dialect === 'postgres') {
      await expect(run).rejects.toThrow(/COMMIT answered ROLLBACK/);
      expect(await names([id])).toEqual(['<absent>']);
    } else {
      await run;
      expect(await names([id])).toEqual(['after a swallowed error']);
    }
  });

  it('opens no transaction on the server when the body runs no SQL, and refuses SQL once the body ended', async () => {
    let kept: Tx | undefined;
    const opened = await runTransaction(t.db, 'BatchNoSql', (tx) => {
      kept = tx;
      return Promise.resolve(tx.opened);
    });
    expect(opened).toBe(false);
    await expect(kept!.rows('SELECT 1 AS one')).rejects.toThrow(/finished transaction/);
  });
});

describe('final writes sent with COMMIT (Tx.commitWith)', () => {
  const insert = (tx: Tx, id: string, name: string) => ({
    sql: `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
    params: [id, name],
  });

  it('commits them after what the transaction did before, in order', async () => {
    const [a, b] = [randomUUID(), randomUUID()];
    const out = await runTransaction(t.db, 'FinalWrites', async (tx) => {
      await insertWorkspace(tx, a, 'first');
      void tx.commitWith([
        insert(tx, b, 'second'),
        { sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['renamed', a] },
      ]);
      return 'done';
    });
    expect(out).toBe('done');
    expect(await names([a, b])).toEqual(['renamed', 'second']);
  });

  it('opens the transaction itself when nothing was sent before', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'OnlyFinalWrites', (tx) => {
      void tx.commitWith([insert(tx, id, 'alone')]);
      return Promise.resolve();
    });
    expect(await names([id])).toEqual(['alone']);
  });

  it('a read closing the final writes answers with what they wrote, once committed', async () => {
    const id = randomUUID();
    const answer = await runTransaction(t.db, 'FinalRead', async (tx) => {
      await tx.rows('SELECT 1 AS one');
      return {
        results: tx.commitWith([
          insert(tx, id, 'written'),
          { sql: 'SELECT name FROM workspaces WHERE id = ?', params: [id] },
        ]),
      };
    });
    const results = await answer.results;
    expect(results.map((r) => r.affected)[0]).toBe(1);
    expect(results[1]?.rows).toEqual([{ name: 'written' }]);
    expect(await names([id])).toEqual(['written']);
  });

  it("the final statements' answer is an error when they did not commit", async () => {
    const [a, b] = [randomUUID(), randomUUID()];
    await runTransaction(t.db, 'Seed', (tx) => insertWorkspace(tx, b, 'held'));
    let answer: Promise<unknown> | undefined;
    await expect(
      runTransaction(t.db, 'FinalReadFails', (tx) => {
        answer = tx.commitWith([insert(tx, a, 'a'), insert(tx, b, 'dup'), { sql: 'SELECT 1 AS one', params: [] }]);
        return Promise.resolve();
      }),
    ).rejects.toThrow();
    await expect(answer).rejects.toThrow();
    let rolledBack: Promise<unknown> | undefined;
    await runTransaction(t.db, 'FinalReadRolledBack', (tx) => {
      rolledBack = tx.commitWith([insert(tx, a, 'a')]);
      tx.rollbackOnly();
      return Promise.resolve();
    });
    await expect(rolledBack).rejects.toThrow(/without its final statements/);
    expect(await names([a, b])).toEqual(['<absent>', 'held']);
  });

  it('a failing final write rolls back the whole transaction and its error propagates', async () => {
    const [a, b] = [randomUUID(), randomUUID()];
    await runTransaction(t.db, 'Seed', (tx) => insertWorkspace(tx, b, 'taken'));
    await expect(
      runTransaction(t.db, 'FinalWritesFail', async (tx) => {
        await insertWorkspace(tx, a, 'before');
        void tx.commitWith([
          { sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['changed', b] },
          insert(tx, b, 'dup'),
        ]);
      }),
    ).rejects.toThrow();
    expect(await names([a, b])).toEqual(['<absent>', 'taken']);
  });

  it('refuses a statement after the final writes', async () => {
    await expect(
      runTransaction(t.db, 'AfterFinal', async (tx) => {
        void tx.commitWith([insert(tx, randomUUID(), 'x')]);
        await tx.rows('SELECT 1 AS one');
      }),
    ).rejects.toThrow(/after commitWith/);
  });
});
