/**
 * Database faults a test can switch on, as triggers on the real tables (both
 * dialects):
 * - `deadlockOn`: while on, every `event` (UPDATE or INSERT) on `table` whose
 *   new row `when` admits (SQL over NEW, and OLD for updates) fails as a
 *   deadlock would, so the command restarts until its retries are used up
 *   (`retry_exhausted`: a database fault, not a ledger answer); `off()` ends
 *   the fault, `drop()` removes the trigger;
 * - `rewriteOn`: the row a command writes is not the row it reads back.
 * A trigger acts on every session's writes: the database is shared by the
 * test files that run at the same time, so `when` must name the test's own
 * rows (its task, its operation), or another file's creations meet the fault.
 */
import { randomUUID } from 'node:crypto';
import type { Db } from '../../src/db/tx';
import { sql } from './db';

/**
 * A BEFORE `event` row trigger on `table` named `name`: `pgBody` is the body of a PL/pgSQL function (before its
 * `RETURN NEW`), `mysqlBody` the trigger's statement list. `drop()` removes the trigger (and the function).
 */
async function rowTrigger(
  db: Db,
  name: string,
  table: string,
  event: 'UPDATE' | 'INSERT',
  pgBody: string,
  mysqlBody: string,
): Promise<() => Promise<void>> {
  if (db.dialect === 'postgres') {
    await sql(
      db,
      `CREATE FUNCTION ${name}_fn() RETURNS trigger AS $$ BEGIN ${pgBody} RETURN NEW; END $$ LANGUAGE plpgsql`,
    );
    await sql(db, `CREATE TRIGGER ${name}_tr BEFORE ${event} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}_fn()`);
  } else {
    await sql(db, `CREATE TRIGGER ${name}_tr BEFORE ${event} ON ${table} FOR EACH ROW BEGIN ${mysqlBody} END`);
  }
  return async () => {
    await sql(db, `DROP TRIGGER ${name}_tr${db.dialect === 'postgres' ? ` ON ${table}` : ''}`);
    if (db.dialect === 'postgres') await sql(db, `DROP FUNCTION ${name}_fn()`);
  };
}

export async function deadlockOn(db: Db, table: string, event: 'UPDATE' | 'INSERT', when: string) {
  const flag = `tl_fault_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  await sql(db, `CREATE TABLE ${flag} (on_ integer)`);
  await sql(db, `INSERT INTO ${flag} VALUES (1)`);
  const test = `(${when}) AND EXISTS (SELECT 1 FROM ${flag})`;
  const dropTrigger = await rowTrigger(
    db,
    flag,
    table,
    event,
    `IF ${test} THEN RAISE EXCEPTION 'injected' USING ERRCODE = '40P01'; END IF;`,
    `IF ${test} THEN SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'; END IF;`,
  );
  return {
    off: () => sql(db, `DELETE FROM ${flag}`),
    drop: async () => {
      await dropTrigger();
      await sql(db, `DROP TABLE ${flag}`);
    },
  };
}

/**
 * Every `event` (INSERT or UPDATE) on `table` whose new row `when` admits (SQL
 * over NEW) gets `column` set to `value` (SQL over NEW) by a trigger: the row
 * a command writes is not the row it reads back. Both dialects; `drop()`
 * removes it.
 */
export async function rewriteOn(
  db: Db,
  table: string,
  event: 'INSERT' | 'UPDATE',
  column: string,
  value: string,
  /** Which rows: name the test's own (its task or operation). The database is shared by the test files running at once. */
  when: string,
) {
  const name = `tl_rewrite_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  const drop = await rowTrigger(
    db,
    name,
    table,
    event,
    `IF ${when} THEN NEW.${column} := ${value}; END IF;`,
    `IF ${when} THEN SET NEW.${column} = ${value}; END IF;`,
  );
  return { drop };
}
