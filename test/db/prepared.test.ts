/**
 * Prepared statements (src/db/pg-prepared.ts, docs/adr/0017): on PostgreSQL
 * a statement that recurs runs as EXECUTE of a statement prepared once per
 * connection; values still arrive byte for byte, and every way the record of
 * a connection can go wrong (a failed batch that carried a PREPARE,
 * statements deallocated behind the runner's back, a text the server cannot
 * prepare) ends in a transaction that commits, never in an error the caller
 * sees. MySQL runs the same transactions unprepared, with the same results.
 * One connection in the pool, so every transaction here shares its state.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bool, execOnce, readRows, runTransaction, type Tx } from '../../src/db/tx';
import { uniqueViolationConstraint } from '../../src/db/dialect';
import { useTestDb } from '../support/db';

const t = useTestDb(1);

const SELECT_NAME = 'SELECT name FROM workspaces WHERE id = ? AND state = ?';

function insertWorkspace(tx: Tx, id: string, name: string): Promise<number> {
  return tx.exec(
    `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
    [id, name],
  );
}

async function nameOf(id: string): Promise<string | undefined> {
  const rows = await runTransaction(t.db, 'PreparedRead', (tx) =>
    tx.rows<{ name: string }>(SELECT_NAME, [id, 'active']),
  );
  return rows[0]?.name;
}

async function preparedTexts(): Promise<string[]> {
  const rows = await runTransaction(t.db, 'PreparedList', (tx) =>
    tx.rows<{ statement: string }>('SELECT statement FROM pg_prepared_statements'),
  );
  return rows.map((r) => r.statement);
}

describe('prepared statements', () => {
  it('a statement that recurs is prepared once on PostgreSQL, and values arrive byte for byte', async () => {
    const tricky = ["it's", 'back\\slash \\x41', 'a ? b $1 c', 'line\nbreak', 'ünïcødé ✓ 漢字', ''];
    for (const name of tricky) {
      const id = randomUUID();
      await runTransaction(t.db, 'PreparedInsert', (tx) => insertWorkspace(tx, id, name));
      // Three reads: the first inlined, the second prepares, the third runs what is prepared.
      expect([await nameOf(id), await nameOf(id), await nameOf(id)]).toEqual([name, name, name]);
    }
    if (t.db.dialect === 'postgres') {
      const texts = await preparedTexts();
      expect(texts.filter((s) => s.includes('SELECT name FROM workspaces WHERE id = $1 AND state = $2'))).toHaveLength(
        1,
      );
      expect(texts.some((s) => s.includes(' AS INSERT INTO workspaces'))).toBe(true);
    }
  });

  it('a batch that failed after carrying a PREPARE leaves the next transaction working', async () => {
    const taken = randomUUID();
    const name = `taken-${taken}`;
    await runTransaction(t.db, 'PreparedSeed', (tx) => insertWorkspace(tx, taken, name));
    const probe = 'SELECT count(*) AS n FROM workspaces WHERE name = ? AND id <> ?';
    const count = (tx: Tx, name: string) => tx.one<{ n: number | string }>(probe, [name, taken]);
    await runTransaction(t.db, 'PreparedFirstSight', (tx) => count(tx, 'x'));
    // The probe's second sighting carries its PREPARE; the duplicate insert after it fails the batch.
    const failed = await runTransaction(t.db, 'PreparedFails', (tx) =>
      Promise.all([count(tx, name), insertWorkspace(tx, taken, 'again')]),
    ).catch((err: unknown) => err);
    expect(uniqueViolationConstraint(failed)).not.toBeNull();
    for (let i = 0; i < 3; i++) {
      const row = await runTransaction(t.db, 'PreparedAfterFailure', (tx) => count(tx, name));
      expect(Number(row?.n)).toBe(0);
    }
    expect(await nameOf(taken)).toBe(name);
  });

  it('statements deallocated behind the runner: the transaction restarts and commits', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'PreparedInsert', (tx) => insertWorkspace(tx, id, 'before'));
    expect(await nameOf(id)).toBe('before');
    expect(await nameOf(id)).toBe('before');
    if (t.db.dialect === 'postgres') {
      await runTransaction(t.db, 'PreparedDrop', (tx) => tx.exec('DEALLOCATE ALL'));
      expect(await preparedTexts()).not.toContain(expect.stringContaining('WHERE id = $1 AND state = $2'));
    }
    // On PostgreSQL this read's EXECUTE finds nothing prepared (26000): the runner restarts it, afresh.
    expect(await nameOf(id)).toBe('before');
    expect(await nameOf(id)).toBe('before');
  });

  it('a statement whose parameter type the server cannot infer runs inlined instead', async () => {
    const echo = (v: string) =>
      runTransaction(t.db, 'PreparedEcho', (tx) =>
        tx.one<{ v: string; blank: unknown }>('SELECT ? AS v, ? IS NULL AS blank', [v, v]),
      );
    const seen = [];
    for (const v of ['one', 'two', 'three']) seen.push(await echo(v));
    expect(seen.map((r) => r?.v)).toEqual(['one', 'two', 'three']);
    expect(seen.map((r) => bool(r?.blank))).toEqual([false, false, false]);
    if (t.db.dialect === 'postgres') {
      expect((await preparedTexts()).some((s) => s.includes('AS v'))).toBe(false);
    }
  });

  it('reads and one-statement writes outside a transaction run prepared too, and heal the same way', async () => {
    const id = randomUUID();
    await runTransaction(t.db, 'PreparedInsert', (tx) => insertWorkspace(tx, id, 'alone'));
    const read = () =>
      readRows<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ? AND ? = ?', [id, 1, 1]);
    const rename = (name: string) =>
      execOnce(t.db, 'PreparedRename', 'UPDATE workspaces SET name = ?, updated_at = CURRENT_TIMESTAMP WHERE id = ?', [
        name,
        id,
      ]);
    for (const name of ['a', 'b', 'c']) {
      expect(await rename(name)).toBe(1);
      expect(await read()).toEqual([{ name }]);
    }
    if (t.db.dialect === 'postgres') {
      const texts = await preparedTexts();
      expect(texts.some((s) => s.includes('AS SELECT name FROM workspaces WHERE id = $1 AND $2 = $3'))).toBe(true);
      expect(texts.some((s) => s.includes('AS UPDATE workspaces SET name = $1'))).toBe(true);
      await runTransaction(t.db, 'PreparedDrop', (tx) => tx.exec('DEALLOCATE ALL'));
    }
    expect(await rename('d')).toBe(1);
    expect(await read()).toEqual([{ name: 'd' }]);
  });
});
