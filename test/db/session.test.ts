/**
 * Every Store transaction runs READ COMMITTED in UTC on both dialects — set
 * once per pooled connection, not per transaction — including on a
 * connection that the pool hands out again; plain reads outside a
 * transaction run in UTC as well.
 */
import { describe, expect, it } from 'vitest';
import { readRows, runTransaction } from '../../src/db/tx';
import { useTestDb } from '../support/db';

const t = useTestDb();

async function sessionOf(): Promise<{ isolation: string; offsetMinutes: number }> {
  return runTransaction(t.db, 'ReadSession', async (tx) => {
    if (tx.dialect === 'postgres') {
      const [row] = await tx.rows<{ iso: string; tz: string }>(
        "SELECT current_setting('transaction_isolation') AS iso, current_setting('TimeZone') AS tz",
      );
      return { isolation: row!.iso.toUpperCase(), offsetMinutes: row!.tz === 'UTC' ? 0 : NaN };
    }
    const [row] = await tx.rows<{ iso: string; offset: number | string }>(
      'SELECT @@tx_isolation AS iso, TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW()) AS `offset`',
    );
    return { isolation: row!.iso.replace('-', ' ').toUpperCase(), offsetMinutes: Number(row!.offset) };
  });
}

describe('transaction session settings', () => {
  // First in the file: these reads open fresh pooled connections no transaction has touched yet.
  it('gives plain reads outside a transaction the same UTC session, on fresh connections too', async () => {
    const sql =
      t.db.dialect === 'postgres'
        ? "SELECT current_setting('TimeZone') AS tz"
        : "SELECT IF(@@session.time_zone IN ('+00:00', 'UTC'), 'UTC', @@session.time_zone) AS tz";
    for (let round = 0; round < 2; round++) {
      const zones = await Promise.all(Array.from({ length: 12 }, () => readRows<{ tz: string }>(t.db, sql)));
      for (const [row] of zones) expect(row!.tz).toBe('UTC');
    }
  });

  it('runs every transaction READ COMMITTED in UTC, on fresh and reused pooled connections', async () => {
    // More transactions than the pool has connections, concurrently and then again: every one is checked.
    for (let round = 0; round < 2; round++) {
      const sessions = await Promise.all(Array.from({ length: 12 }, () => sessionOf()));
      for (const s of sessions) expect(s).toEqual({ isolation: 'READ COMMITTED', offsetMinutes: 0 });
    }
  });
});
