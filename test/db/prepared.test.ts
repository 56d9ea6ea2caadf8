/**
 * Prepared statements (src/db/pg-prepared.ts, docs/adr/0017; on MariaDB
 * src/db/mysql-prepared.ts, ADR 0043): a statement that recurs runs as
 * EXECUTE of a statement prepared once per connection; values still arrive
 * byte for byte, and every way the record of a connection can go wrong (a
 * failed batch that carried a PREPARE, statements deallocated behind the
 * runner's back, a text the server cannot prepare) ends in a transaction that
 * commits, never in an error the caller sees. One connection in the pool, so
 * every transaction here shares its state (and, on MariaDB, its session
 * counters of SQL PREPAREs and EXECUTEs).
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { bool, execOnce, readRows, runTransaction, type Tx } from '../../src/db/tx';
import { uniqueViolationConstraint } from '../../src/db/dialect';
import { mysqlBatchTexts } from '../../src/db/mysql-prepared';
import { preparedNameOf } from '../../src/db/prepared-texts';
import { insertWorkspace, useTestDb } from '../support/db';

const t = useTestDb(1);

const SELECT_NAME = 'SELECT name FROM workspaces WHERE id = ? AND state = ?';

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

/** MariaDB: how many SQL PREPAREs and EXECUTEs this session (the pool's one connection) has run. */
async function sessionCounts(): Promise<{ prepare: number; execute: number }> {
  const rows = await runTransaction(t.db, 'PreparedCounts', (tx) =>
    tx.rows<{ Variable_name: string; Value: string }>(
      "SHOW SESSION STATUS WHERE Variable_name IN ('Com_prepare_sql', 'Com_execute_sql')",
    ),
  );
  const of = (name: string) => Number(rows.find((r) => r.Variable_name === name)?.Value ?? Number.NaN);
  return { prepare: of('Com_prepare_sql'), execute: of('Com_execute_sql') };
}

describe('prepared statements', () => {
  it('a statement that recurs is prepared once (PostgreSQL, MariaDB), and values arrive byte for byte', async () => {
    const tricky = ["it's", 'back\\slash \\x41', 'a ? b $1 c', 'line\nbreak', 'ünïcødé ✓ 漢字', ''];
    const before = t.db.dialect === 'mysql' ? await sessionCounts() : null;
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
      expect(texts.some((s) => s.startsWith('INSERT INTO workspaces'))).toBe(true);
    } else {
      // The read was prepared once on this connection and then executed: 6 values x 2 prepared reads, and the
      // inserts from their second on.
      const after = await sessionCounts();
      expect(preparedNameOf(SELECT_NAME)).toMatch(/^tl_/);
      expect(after.execute - before!.execute).toBeGreaterThanOrEqual(tricky.length * 2);
      expect(after.prepare - before!.prepare).toBeGreaterThanOrEqual(1);
      expect(after.prepare - before!.prepare).toBeLessThanOrEqual(4);
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
    } else {
      const name = preparedNameOf(SELECT_NAME);
      expect(name).toMatch(/^tl_/);
      await runTransaction(t.db, 'PreparedDrop', (tx) => tx.exec(`DEALLOCATE PREPARE ${name}`));
    }
    // This read's EXECUTE finds nothing prepared (26000 on PostgreSQL, 1243 on MariaDB): the runner restarts it,
    // afresh.
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
      expect(texts.some((s) => s.startsWith('SELECT name FROM workspaces WHERE id = $1 AND $2 = $3'))).toBe(true);
      expect(texts.some((s) => s.startsWith('UPDATE workspaces SET name = $1'))).toBe(true);
      await runTransaction(t.db, 'PreparedDrop', (tx) => tx.exec('DEALLOCATE ALL'));
    }
    expect(await rename('d')).toBe(1);
    expect(await read()).toEqual([{ name: 'd' }]);
  });

  // Last: it makes this process stop preparing on MariaDB (as a server at its bound would).
  it("MariaDB's record after failures: a text it would not prepare runs inlined; at the server's bound, none is", () => {
    const conn = { _handshakePacket: { serverVersion: '5.5.5-10.11.19-MariaDB' } };
    const stmt = { sql: `SELECT id FROM workspaces WHERE id = ? AND name <> '${randomUUID()}'`, params: ['x'] };
    const bodyOf = () => mysqlBatchTexts(conn, [stmt]);
    expect(bodyOf().body[0]!.sql).toBe(stmt.sql); // first sighting: inlined
    const second = bodyOf();
    expect(second.lead.map((l) => l.sql)).toEqual([expect.stringMatching(/^PREPARE tl_\w+ FROM \?$/)]);
    expect(second.body[0]!.sql).toMatch(/^EXECUTE tl_\w+ USING \?$/);
    const refused = Object.assign(new Error('not supported in the prepared statement protocol'), { errno: 1295 });
    second.settle(false, refused);
    expect((refused as { preparedRestart?: boolean }).preparedRestart).toBe(true);
    expect(bodyOf().body[0]!.sql).toBe(stmt.sql); // runs inlined from now on
    const other = { sql: `SELECT id FROM workspaces WHERE id = ? AND name <> '${randomUUID()}'`, params: ['y'] };
    mysqlBatchTexts(conn, [other]);
    const full = Object.assign(new Error('max_prepared_stmt_count'), { errno: 1461 });
    const prepared = mysqlBatchTexts(conn, [other]);
    expect(prepared.lead).toHaveLength(1);
    prepared.settle(false, full);
    expect((full as { preparedRestart?: boolean }).preparedRestart).toBe(true);
    expect(mysqlBatchTexts(conn, [other]).body[0]!.sql).toBe(other.sql);
    // MySQL (no "MariaDB" in its handshake) never prepares.
    const mysql8 = { _handshakePacket: { serverVersion: '8.0.36' } };
    expect(mysqlBatchTexts(mysql8, [stmt, stmt]).lead).toEqual([]);
  });
});
