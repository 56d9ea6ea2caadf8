/**
 * An effect row's insert answers the row's read-back (`insertAnswering`, src/store/effects/row-locks.ts; ADR 0051):
 * where the server answers `INSERT ... RETURNING` (PostgreSQL, MariaDB: `Tx.insertReturning`), the insert returns
 * the row as stored and the plain read of that row that follows is answered from there, with no statement of its
 * own, until a write to its table; where it does not (MySQL 8), the insert and the read go to the server as before,
 * with the same answers. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { answersInsertReturning } from '../../src/db/mysql-prepared';
import { runTransaction, type Tx } from '../../src/db/tx';
import { insertAnswering, rowRead } from '../../src/store/effects/row-locks';
import { sentStatements } from '../support/round-trips';
import { useTestDb } from '../support/db';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const COLUMNS = 'id, workspace_id, name';

/** A workspace group (its own row, referencing a workspace inserted first), inserted and then read back. */
async function insertAndReadBack(tx: Tx, ws: string, id: string, name: string) {
  await tx.exec(
    `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, 'w', 'active', ${tx.now}, ${tx.now})`,
    [ws],
  );
  const inserted = await insertAnswering(
    tx,
    {
      sql: `INSERT INTO workspace_groups (id, workspace_id, name, created_at) VALUES (?, ?, ?, ${tx.now})`,
      params: [id, ws, name],
    },
    { table: 'workspace_groups', columns: COLUMNS, where: 'id = ?', params: [id] },
  );
  const readBack = await tx.rows(rowRead('workspace_groups', COLUMNS, 'id = ?'), [id]);
  return { inserted, readBack };
}

const plainReads = (sent: string[]) =>
  sent.filter((s) => /^SELECT id, workspace_id, name FROM workspace_groups/.test(s));

describe('an insert that answers its read-back', () => {
  it('returns the row as stored, and the read-back sends nothing of its own', async () => {
    const sent = sentStatements(t.db);
    const [ws, id] = [randomUUID(), randomUUID()];
    const { inserted, readBack } = await runTransaction(t.db, 'InsertAnswering', async (tx) => {
      // PostgreSQL and MariaDB (the dialects this suite runs on) both answer INSERT ... RETURNING.
      expect(tx.insertReturning).toBe(true);
      return insertAndReadBack(tx, ws, id, 'ünïcødé ✓');
    });
    expect(inserted).toBe(1);
    expect(readBack).toEqual([{ id, workspace_id: ws, name: 'ünïcødé ✓' }]);
    expect(sent.some((s) => /^INSERT INTO workspace_groups[\s\S]*RETURNING id, workspace_id, name$/.test(s))).toBe(
      true,
    );
    expect(plainReads(sent)).toEqual([]);
  });

  it('is read from the server again once the transaction writes its table', async () => {
    const sent = sentStatements(t.db);
    const [ws, id] = [randomUUID(), randomUUID()];
    const after = await runTransaction(t.db, 'InsertAnsweringDropped', async (tx) => {
      await insertAndReadBack(tx, ws, id, 'first');
      await tx.exec('UPDATE workspace_groups SET name = ? WHERE id = ?', ['second', id]);
      return tx.rows(rowRead('workspace_groups', COLUMNS, 'id = ?'), [id]);
    });
    expect(after).toEqual([{ id, workspace_id: ws, name: 'second' }]);
    expect(plainReads(sent)).toHaveLength(1);
  });

  it('where the server has no INSERT ... RETURNING (MySQL 8), inserts and reads back as before', async () => {
    const sent = sentStatements(t.db);
    const [ws, id] = [randomUUID(), randomUUID()];
    const { inserted, readBack } = await runTransaction(t.db, 'InsertWithoutReturning', async (tx) => {
      (tx as { insertReturning: boolean }).insertReturning = false;
      return insertAndReadBack(tx, ws, id, 'plain');
    });
    expect(inserted).toBe(1);
    expect(readBack).toEqual([{ id, workspace_id: ws, name: 'plain' }]);
    expect(sent.some((s) => /RETURNING/.test(s))).toBe(false);
    expect(plainReads(sent)).toHaveLength(1);
  });

  it('is used on MariaDB 10.5 and later only, told by the server handshake; never on MySQL 8', () => {
    const server = (serverVersion: unknown) => ({ _handshakePacket: { serverVersion } });
    expect(answersInsertReturning(server('5.5.5-10.11.19-MariaDB-0+deb12u1'))).toBe(true);
    expect(answersInsertReturning(server('5.5.5-10.5.0-MariaDB'))).toBe(true);
    expect(answersInsertReturning(server('11.4.2-MariaDB'))).toBe(true);
    expect(answersInsertReturning(server('5.5.5-10.4.32-MariaDB'))).toBe(false);
    expect(answersInsertReturning(server('8.4.3'))).toBe(false);
    expect(answersInsertReturning(server('8.0.36-0ubuntu0.22.04.1'))).toBe(false);
    expect(answersInsertReturning(server(undefined))).toBe(false);
    expect(answersInsertReturning({})).toBe(false);
  });
});
