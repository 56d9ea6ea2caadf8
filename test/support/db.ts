/**
 * Test access to the project's database (the one its vitest project points
 * TASKLEDGER_DB_URL at, recreated and migrated by the global setup).
 */
import { afterAll, beforeAll } from 'vitest';
import { dbConfigFromEnv } from '../../src/db/config';
import { createDataSource } from '../../src/db/data-source';
import { isRetryableError, toDialectSql } from '../../src/db/dialect';
import type { Db, SqlParam, Tx } from '../../src/db/tx';

/** Opens one DataSource for the calling test file and closes it afterwards. */
export function useTestDb(poolSize = 6): { readonly db: Db } {
  const holder = {} as { db: Db };
  beforeAll(async () => {
    const config = dbConfigFromEnv();
    const ds = createDataSource(config, { poolSize });
    await ds.initialize();
    holder.db = { ds, dialect: config.dialect };
  });
  afterAll(async () => {
    await holder.db?.ds.destroy();
  });
  return holder;
}

/**
 * Runs one statement outside any Store transaction (test setup and inspection). A statement of its own
 * (autocommit) that loses a deadlock to another test file's transaction on the shared database (InnoDB's
 * next-key locks under the pool's default REPEATABLE READ) is simply run again: it changed nothing.
 */
export async function sql<T = Record<string, unknown>>(db: Db, text: string, params: SqlParam[] = []): Promise<T[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      const res = await db.ds.query(toDialectSql(db.dialect, text), params);
      return (Array.isArray(res) && db.dialect === 'postgres' && Array.isArray(res[0]) ? res[0] : res) as T[];
    } catch (err) {
      if (attempt >= 5 || !isRetryableError(err)) throw err;
      await new Promise((r) => setTimeout(r, 20 * attempt));
    }
  }
}

export async function count(db: Db, table: string, where = '1 = 1', params: SqlParam[] = []): Promise<number> {
  const rows = await sql<{ n: string | number }>(db, `SELECT COUNT(*) AS n FROM ${table} WHERE ${where}`, params);
  return Number(rows[0]!.n);
}

/** One active workspace row written inside `tx` (the statement the batch and prepared-statement tests send). */
export function insertWorkspace(tx: Tx, id: string, name: string): Promise<number> {
  return tx.exec(
    `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
    [id, name],
  );
}
