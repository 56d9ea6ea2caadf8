/**
 * Writes a transaction does not wait for (`Tx.expect`): the write travels
 * with the next statements, in issue order, in the same round trip; the
 * runner checks its affected-row count before COMMIT, and a wrong count rolls
 * back everything the transaction did and is the error the caller sees —
 * also when a later statement failed first. The step records of a ledger
 * batch go this way (`casFromRunning`).
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runTransaction, type Tx } from '../../src/db/tx';
import { ConflictError, isTaskLedgerError } from '../../src/domain/errors';
import { insertWorkspace, sql, useTestDb } from '../support/db';
import { toDialectSql } from '../../src/db/dialect';
import { countRoundTrips, sentStatements } from '../support/round-trips';

const t = useTestDb();

function rename(tx: Tx, id: string, from: string, to: string): void {
  tx.expect(
    { sql: 'UPDATE workspaces SET name = ? WHERE id = ? AND name = ?', params: [to, id, from] },
    1,
    () => new ConflictError('stale_claim', `workspace ${id} is not named ${from}`, { id }),
  );
}

async function nameOf(id: string): Promise<string> {
  const rows = await sql<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ?', [id]);
  return rows[0]?.name ?? '<absent>';
}

/**
 * A transaction whose body only issues statements it does not wait for: all of them go with COMMIT, in one round
 * trip. Answers the transaction's error, or undefined when it committed.
 */
function sentWithCommit(name: string, body: (tx: Tx) => void): Promise<unknown> {
  return runTransaction(t.db, name, (tx) => {
    body(tx);
    void tx.commitWith([]).catch(() => undefined);
    return Promise.resolve();
  }).then(
    () => undefined,
    (e: unknown) => e,
  );
}

/** Two new workspaces, `guard` named 'guard' and `id` named 'first'. */
async function guardAndFirst(): Promise<{ guard: string; id: string }> {
  const guard = randomUUID();
  const id = randomUUID();
  await runTransaction(t.db, 'GuardAndFirst', async (tx) => {
    await insertWorkspace(tx, guard, 'guard');
    await insertWorkspace(tx, id, 'first');
  });
  return { guard, id };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('writes sent without waiting (Tx.expect)', () => {
  it('travel with the next statement, in order: one round trip for the write and the read after it', async () => {
    const id = randomUUID();
    const trips = countRoundTrips(t.db, id);
    const seen = await runTransaction(t.db, 'ExpectTravels', async (tx) => {
      await insertWorkspace(tx, id, 'before');
      rename(tx, id, 'before', 'after');
      return tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [id]);
    });
    expect(seen).toEqual([{ name: 'after' }]);
    // The INSERT (with START TRANSACTION), then the UPDATE and the read together.
    expect(trips.calls).toBe(2);
    expect(await nameOf(id)).toBe('after');
  });

  it('roll back everything the transaction did, before and after, when the count is wrong', async () => {
    const kept = randomUUID();
    const other = randomUUID();
    const err = await runTransaction(t.db, 'ExpectMismatch', async (tx) => {
      await insertWorkspace(tx, kept, 'written before');
      rename(tx, kept, 'not its name', 'renamed');
      await insertWorkspace(tx, other, 'written after');
    }).catch((e: unknown) => e);
    expect(isTaskLedgerError(err, 'stale_claim')).toBe(true);
    expect(await nameOf(kept)).toBe('<absent>');
    expect(await nameOf(other)).toBe('<absent>');
  });

  it('are checked before COMMIT even when nothing follows them', async () => {
    const id = randomUUID();
    const err = await runTransaction(t.db, 'ExpectLast', async (tx) => {
      await insertWorkspace(tx, id, 'written');
      rename(tx, id, 'someone else', 'renamed');
    }).catch((e: unknown) => e);
    expect(isTaskLedgerError(err, 'stale_claim')).toBe(true);
    expect(await nameOf(id)).toBe('<absent>');
  });

  it('report the write that did not take, not the later failure that followed from it', async () => {
    const existing = randomUUID();
    await runTransaction(t.db, 'ExpectSetup', (tx) => insertWorkspace(tx, existing, 'exists'));
    const err = await runTransaction(t.db, 'ExpectThenFail', async (tx) => {
      rename(tx, existing, 'missing', 'renamed');
      await tx.rows('SELECT name FROM workspaces WHERE id = ?', [existing]);
      // A later statement fails (a duplicate key): the earlier wrong count is the cause the caller sees.
      await insertWorkspace(tx, existing, 'duplicate');
    }).catch((e: unknown) => e);
    expect(isTaskLedgerError(err, 'stale_claim')).toBe(true);
    expect(await nameOf(existing)).toBe('exists');
  });

  it('still unsent when the body ends, go with COMMIT (one round trip fewer), checked all the same', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'ExpectWarm', (tx) => tx.rows('SELECT 1 AS one'));
    const trips = countRoundTrips(t.db);
    await runTransaction(t.db, 'ExpectWithCommit', async (tx) => {
      await insertWorkspace(tx, id, 'before');
      rename(tx, id, 'before', 'after');
    });
    const calls = trips.calls;
    vi.restoreAllMocks();
    // START TRANSACTION with the INSERT, then the checked UPDATE with COMMIT (MySQL: the UPDATE and its check).
    expect(calls).toBe(2);
    expect(await nameOf(id)).toBe('after');
  });

  it('sent with COMMIT, a count too high fails as one too low, and the final writes after it do not commit', async () => {
    const a = randomUUID();
    const b = randomUUID();
    const after = randomUUID();
    await runTransaction(t.db, 'ExpectTwoSetup', (tx) =>
      Promise.all([insertWorkspace(tx, a, 'twin'), insertWorkspace(tx, b, 'twin')]),
    );
    const err = await runTransaction(t.db, 'ExpectTooMany', (tx) => {
      tx.expect(
        { sql: "UPDATE workspaces SET name = 'one of them' WHERE id IN (?, ?)", params: [a, b] },
        1,
        () => new ConflictError('stale_claim', 'two rows changed where one should', {}),
      );
      void tx.commitWith([
        {
          sql: `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, 'final', 'active', ${tx.now}, ${tx.now})`,
          params: [after],
        },
      ]);
      return Promise.resolve();
    }).catch((e: unknown) => e);
    expect(isTaskLedgerError(err, 'stale_claim')).toBe(true);
    expect([await nameOf(a), await nameOf(b), await nameOf(after)]).toEqual(['twin', 'twin', '<absent>']);
  });

  it('sent with COMMIT, the check that failed is the one reported, and nothing commits', async () => {
    const a = randomUUID();
    const b = randomUUID();
    await runTransaction(t.db, 'ExpectWhichSetup', (tx) =>
      Promise.all([insertWorkspace(tx, a, 'a0'), insertWorkspace(tx, b, 'b0')]),
    );
    const trips = countRoundTrips(t.db);
    const err = await runTransaction(t.db, 'ExpectWhich', (tx) => {
      rename(tx, a, 'a0', 'a1');
      rename(tx, b, 'not b0', 'b1');
      return Promise.resolve();
    }).catch((e: unknown) => e);
    // The two checked writes and COMMIT in one round trip (then the ROLLBACK).
    expect(trips.calls).toBe(2);
    vi.restoreAllMocks();
    expect((err as Error).message).toBe(`workspace ${b} is not named not b0`);
    expect([await nameOf(a), await nameOf(b)]).toEqual(['a0', 'b0']);
  });

  it('let the transaction commit when every count is right', async () => {
    const a = randomUUID();
    const b = randomUUID();
    await runTransaction(t.db, 'ExpectAllRight', async (tx) => {
      await Promise.all([insertWorkspace(tx, a, 'a0'), insertWorkspace(tx, b, 'b0')]);
      rename(tx, a, 'a0', 'a1');
      rename(tx, b, 'b0', 'b1');
      rename(tx, a, 'a1', 'a2');
    });
    expect([await nameOf(a), await nameOf(b)]).toEqual(['a2', 'b1']);
  });
});

/** Inserts a workspace and checks, later, that it reads back with `name` (the read-back of Tx.checkLater). */
function insertChecked(tx: Tx, id: string, inserted: string, name: string): void {
  const insert = insertWorkspace(tx, id, inserted);
  const readBack = tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [id]);
  tx.checkLater(
    Promise.all([insert, readBack]).then(([, rows]) => {
      if (rows[0]?.name !== name) throw new Error(`workspace ${id} did not read back as ${name}`);
    }),
  );
}

describe('checks a transaction does not wait for (Tx.checkLater)', () => {
  it('let the statements issued after the checked ones travel in the same round trip', async () => {
    const id = randomUUID();
    const next = randomUUID();
    const trips = countRoundTrips(t.db);
    await runTransaction(t.db, 'CheckTravels', async (tx) => {
      insertChecked(tx, id, 'inserted', 'inserted');
      await insertWorkspace(tx, next, 'next');
    });
    // The insert, its read-back and the next insert (with START TRANSACTION), then COMMIT.
    expect(trips.calls).toBe(2);
    expect([await nameOf(id), await nameOf(next)]).toEqual(['inserted', 'next']);
  });

  it('roll back everything the transaction did, before and after, when the check fails', async () => {
    const before = randomUUID();
    const id = randomUUID();
    const after = randomUUID();
    const err = await runTransaction(t.db, 'CheckFails', async (tx) => {
      await insertWorkspace(tx, before, 'before');
      insertChecked(tx, id, 'inserted', 'something else');
      await insertWorkspace(tx, after, 'after');
      void tx.commitWith([{ sql: 'UPDATE workspaces SET name = ? WHERE id = ?', params: ['final', before] }]);
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe(`workspace ${id} did not read back as something else`);
    expect([await nameOf(before), await nameOf(id), await nameOf(after)]).toEqual(['<absent>', '<absent>', '<absent>']);
  });

  it('report the failing statement when the checked ones failed', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'CheckSeed', (tx) => insertWorkspace(tx, id, 'taken'));
    const other = randomUUID();
    const err = await runTransaction(t.db, 'CheckStatementFails', async (tx) => {
      insertChecked(tx, id, 'duplicate', 'duplicate');
      await insertWorkspace(tx, other, 'other').catch(() => 0);
    }).catch((e: unknown) => e);
    // The duplicate key stopped the batch; the check reports that error, and nothing was written.
    expect(String((err as Error).message)).toMatch(/duplicate|unique/i);
    expect([await nameOf(id), await nameOf(other)]).toEqual(['taken', '<absent>']);
  });
});

describe('fences checked on the server, and everything unsent, with COMMIT (ADR 0028)', () => {
  /** A locking read that must answer `n` rows: a fence. */
  function fence(tx: Tx, id: string, n: number): void {
    tx.expect(
      { sql: `SELECT id FROM workspaces WHERE id = ? AND state = 'active' ${tx.forShare}`, params: [id] },
      n,
      () => new ConflictError('creation_state_conflict', `workspace ${id} fence failed`, { id }),
    );
  }

  function insertAll(tx: Tx, ids: string[]): Promise<unknown> {
    return tx.commitWith(
      ids.map((id) => ({
        sql: `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, 'fenced', 'active', ${tx.now}, ${tx.now})`,
        params: [id],
      })),
    );
  }

  it('fences, a plain statement and the final writes commit in one round trip; the plain one gets its answer', async () => {
    const guard = randomUUID();
    const added = randomUUID();
    await runTransaction(t.db, 'FenceSetup', (tx) => insertWorkspace(tx, guard, 'guard'));
    const trips = countRoundTrips(t.db);
    let answered: unknown = null;
    await runTransaction(t.db, 'FenceCommit', (tx) => {
      fence(tx, guard, 1);
      void tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [guard]).then((r) => {
        answered = r;
      });
      void insertAll(tx, [added]);
      return Promise.resolve();
    });
    const calls = trips.calls;
    vi.restoreAllMocks();
    expect(calls).toBe(1);
    expect(answered).toEqual([{ name: 'guard' }]);
    expect(await nameOf(added)).toBe('fenced');
  });

  it('a fence answering a row too many or too few stops the round trip before COMMIT: its error, nothing written', async () => {
    const guard = randomUUID();
    await runTransaction(t.db, 'FenceSetup2', (tx) => insertWorkspace(tx, guard, 'guard'));
    for (const [id, n] of [
      [guard, 0],
      [randomUUID(), 1],
    ] as const) {
      const added = randomUUID();
      const err = await runTransaction(t.db, 'FenceFails', (tx) => {
        fence(tx, id, n);
        void insertAll(tx, [added]);
        return Promise.resolve();
      }).catch((e: unknown) => e);
      expect(isTaskLedgerError(err, 'creation_state_conflict')).toBe(true);
      expect((err as Error).message).toBe(`workspace ${id} fence failed`);
      expect(await nameOf(added)).toBe('<absent>');
    }
  });

  it('a fence with COMMIT is one statement on either dialect, and its locking read waits for a writer holding the row', async () => {
    const guard = randomUUID();
    const added = randomUUID();
    await runTransaction(t.db, 'FenceSetup5', (tx) => insertWorkspace(tx, guard, 'guard'));
    const holder = t.db.ds.createQueryRunner();
    await holder.connect();
    await holder.startTransaction();
    await holder.query(toDialectSql(t.db.dialect, 'UPDATE workspaces SET name = ? WHERE id = ?'), ['held', guard]);
    const sent = sentStatements(t.db);
    let done = false;
    const fenced = runTransaction(t.db, 'FenceOneStatement', (tx) => {
      fence(tx, guard, 1);
      void insertAll(tx, [added]);
      return Promise.resolve();
    }).then(() => {
      done = true;
    });
    await new Promise((r) => setTimeout(r, 300));
    const waited = !done;
    await holder.commitTransaction();
    await holder.release();
    await fenced;
    vi.restoreAllMocks();
    expect(waited).toBe(true);
    expect(await nameOf(added)).toBe('fenced');
    // The fence and the insert, one statement each: on MySQL no FOUND_ROWS() check follows the fence (ADR 0044).
    expect(sent).toHaveLength(2);
    expect(sent[0]).toMatch(/SELECT id FROM workspaces/);
  });

  it("a write's check before a fence travels in the fence's statement on MySQL: each still reports its own mismatch", async () => {
    const { guard, id } = await guardAndFirst();
    let answered: unknown = null;
    const attempt = (from: string, to: string, fenceRows: number) =>
      sentWithCommit('FoldedCheck', (tx) => {
        rename(tx, id, from, to);
        fence(tx, guard, fenceRows);
        // A plain statement after them gets its own answer: the folded check shifts no result.
        void tx
          .rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [guard])
          .then((r) => {
            answered = r;
          })
          .catch(() => undefined); // Rejected with the transaction's error when a check fails.
      });
    const sent = sentStatements(t.db);
    // Both hold: one round trip, and on MySQL the write's ROW_COUNT() check is a column of the fence's statement.
    expect(await attempt('first', 'second', 1)).toBeUndefined();
    const texts = [...sent];
    vi.restoreAllMocks();
    expect(await nameOf(id)).toBe('second');
    expect(answered).toEqual([{ name: 'guard' }]);
    expect(texts).toHaveLength(3);
    if (t.db.dialect === 'mysql')
      expect(texts[1]).toMatch(/ROW_COUNT\(\).*COUNT\(\*\).*FROM \(SELECT id FROM workspaces/s);
    // The write missed: its own error, even though the fence after it holds; nothing commits.
    expect(((await attempt('first', 'third', 1)) as Error).message).toBe(`workspace ${id} is not named first`);
    // The write took, the fence failed: the fence's error, and the write rolled back.
    expect(((await attempt('second', 'third', 0)) as Error).message).toBe(`workspace ${guard} fence failed`);
    // Both failed: the write's, the first of them.
    expect(((await attempt('first', 'third', 0)) as Error).message).toBe(`workspace ${id} is not named first`);
    expect(await nameOf(id)).toBe('second');
  });

  it('an aggregate fence (HAVING, one row or none) is checked without a derived table on MySQL, alone and after a write (ADR 0047)', async () => {
    const { guard, id } = await guardAndFirst();
    /** Holds when the guard row is named `name`: one aggregate row, or none. */
    const aggregate = (tx: Tx, name: string) =>
      tx.expect(
        {
          sql: `SELECT 1 AS fenced FROM workspaces WHERE id = ?
                 HAVING COUNT(*) = ? AND SUM(CASE WHEN name = ? THEN 1 ELSE 0 END) = ?`,
          params: [guard, 1, name, 1],
        },
        1,
        () => new ConflictError('creation_state_conflict', `workspace ${guard} is not named ${name}`, { id: guard }),
      );
    const attempt = (write: [string, string] | null, name: string) =>
      sentWithCommit('AggregateFence', (tx) => {
        if (write) rename(tx, id, write[0], write[1]);
        aggregate(tx, name);
      });
    const sent = sentStatements(t.db);
    expect(await attempt(null, 'guard')).toBeUndefined();
    expect(await attempt(['first', 'second'], 'guard')).toBeUndefined();
    const texts = [...sent];
    vi.restoreAllMocks();
    expect(await nameOf(id)).toBe('second');
    if (t.db.dialect === 'mysql') {
      // Over its own FROM, its condition a column, the write's check first: no `FROM (SELECT ...) AS checked`.
      const fences = texts.filter((s) => /CASE WHEN COUNT/.test(s));
      expect(fences).toHaveLength(2);
      for (const f of fences) expect(f).not.toMatch(/AS checked|HAVING/);
      expect(fences[1]).toMatch(
        /^SELECT ~0 \+ \('taskledger_expect_\d+' <> '' AND ROW_COUNT\(\)[\s\S]*AS written, ~0 \+ \('taskledger_expect_\d+' <> '' AND \(CASE WHEN COUNT/,
      );
    }
    // The fence fails alone: its error, nothing committed.
    expect(((await attempt(null, 'other')) as Error).message).toBe(`workspace ${guard} is not named other`);
    // An aggregate over no row at all (its SUM is NULL) fails too.
    const none = await sentWithCommit('AggregateNone', (tx) =>
      tx.expect(
        {
          sql: `SELECT 1 AS fenced FROM workspaces WHERE id = ? HAVING SUM(CASE WHEN name = ? THEN 1 ELSE 0 END) = ?`,
          params: [randomUUID(), 'guard', 0],
        },
        1,
        () => new ConflictError('creation_state_conflict', 'no row', {}),
      ),
    );
    expect((none as Error).message).toBe('no row');
    // The write missed, the fence holds: the write's error.
    expect(((await attempt(['first', 'third'], 'guard')) as Error).message).toBe(`workspace ${id} is not named first`);
    // The write took, the fence failed: the fence's error, and the write rolled back.
    expect(((await attempt(['second', 'third'], 'other')) as Error).message).toBe(
      `workspace ${guard} is not named other`,
    );
    // Both failed: the write's, the first of them.
    expect(((await attempt(['first', 'third'], 'other')) as Error).message).toBe(`workspace ${id} is not named first`);
    expect(await nameOf(id)).toBe('second');
  });

  it('a fence sent in an ordinary round trip counts the rows it answered too', async () => {
    const guard = randomUUID();
    await runTransaction(t.db, 'FenceSetup3', (tx) => insertWorkspace(tx, guard, 'guard'));
    const err = await runTransaction(t.db, 'FenceEarly', async (tx) => {
      fence(tx, guard, 0);
      await tx.rows('SELECT 1 AS one');
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe(`workspace ${guard} fence failed`);
    await runTransaction(t.db, 'FenceEarlyOk', async (tx) => {
      fence(tx, guard, 1);
      await tx.rows('SELECT 1 AS one');
    });
  });

  it('a fence sent alone, after the transaction began, counts the rows it answered too', async () => {
    const guard = randomUUID();
    await runTransaction(t.db, 'FenceSetup4', (tx) => insertWorkspace(tx, guard, 'guard'));
    // Its own round trip (a statement alone in a begun transaction: a batch of one, on either dialect).
    const alone = (n: number) =>
      runTransaction(t.db, 'FenceAlone', async (tx) => {
        await tx.rows('SELECT 1 AS one');
        fence(tx, guard, n);
        await new Promise((r) => setTimeout(r, 20));
        await tx.rows('SELECT 2 AS two');
      });
    await alone(1);
    const err = await alone(0).catch((e: unknown) => e);
    expect((err as Error).message).toBe(`workspace ${guard} fence failed`);
  });
});
