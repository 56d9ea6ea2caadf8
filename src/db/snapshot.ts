/**
 * Reads from one consistent snapshot, for read-only reports (`taskledger
 * verify`); never for a Store method, which takes its locks in tier order.
 *
 * Contract: `readSnapshot(db, fn)` opens a REPEATABLE READ, READ ONLY
 * transaction on one connection, gives `fn` a reader whose every statement
 * sees the same snapshot, and rolls back when `fn` settles. It takes no row
 * lock and writes nothing. `fn` must do no I/O but those reads: the
 * transaction stays open until it returns.
 */
import type { SqlParam } from './batch';
import { toDialectSql } from './dialect';
import { ensureSession, type Db } from './tx';

export type SnapshotReader = <T = Record<string, unknown>>(sql: string, params?: SqlParam[]) => Promise<T[]>;

export async function readSnapshot<T>(db: Db, fn: (read: SnapshotReader) => Promise<T>): Promise<T> {
  const qr = db.ds.createQueryRunner();
  await qr.connect();
  try {
    await ensureSession(qr, db.dialect);
    if (db.dialect === 'postgres') {
      await qr.query('START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
    } else {
      // The session default is READ COMMITTED (tx.ts); this sets the next transaction only.
      await qr.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await qr.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
    }
    try {
      const read: SnapshotReader = async <R>(sql: string, params: SqlParam[] = []) =>
        (await qr.query(toDialectSql(db.dialect, sql), params)) as R[];
      return await fn(read);
    } finally {
      await qr.query('ROLLBACK');
    }
  } finally {
    await qr.release();
  }
}
