/**
 * A database fault a test can switch on and off: while on, every `event`
 * (UPDATE or INSERT) on `table` whose new row `when` admits (SQL over NEW,
 * and OLD for updates) fails as a deadlock would, so the command restarts
 * until its retries are used up (`retry_exhausted`: a database fault, not a
 * ledger answer). A trigger on the real table, both dialects; `off()` ends
 * the fault, `drop()` removes the trigger.
 */
import { randomUUID } from 'node:crypto';
import type { Db } from '../../src/db/tx';
import { sql } from './db';

export async function deadlockOn(db: Db, table: string, event: 'UPDATE' | 'INSERT', when: string) {
  const flag = `tl_fault_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  await sql(db, `CREATE TABLE ${flag} (on_ integer)`);
  await sql(db, `INSERT INTO ${flag} VALUES (1)`);
  const test = `(${when}) AND EXISTS (SELECT 1 FROM ${flag})`;
  if (db.dialect === 'postgres') {
    await sql(
      db,
      `CREATE FUNCTION ${flag}_fn() RETURNS trigger AS $$ BEGIN
         IF ${test} THEN RAISE EXCEPTION 'injected' USING ERRCODE = '40P01'; END IF;
         RETURN NEW; END $$ LANGUAGE plpgsql`,
    );
    await sql(db, `CREATE TRIGGER ${flag}_tr BEFORE ${event} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${flag}_fn()`);
  } else {
    await sql(
      db,
      `CREATE TRIGGER ${flag}_tr BEFORE ${event} ON ${table} FOR EACH ROW BEGIN
         IF ${test} THEN SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'; END IF;
       END`,
    );
  }
  return {
    off: () => sql(db, `DELETE FROM ${flag}`),
    drop: async () => {
      await sql(db, `DROP TRIGGER ${flag}_tr${db.dialect === 'postgres' ? ` ON ${table}` : ''}`);
      if (db.dialect === 'postgres') await sql(db, `DROP FUNCTION ${flag}_fn()`);
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
  when = '1 = 1',
) {
  const name = `tl_rewrite_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  if (db.dialect === 'postgres') {
    await sql(
      db,
      `CREATE FUNCTION ${name}_fn() RETURNS trigger AS $$ BEGIN
         IF ${when} THEN NEW.${column} := ${value}; END IF;
         RETURN NEW; END $$ LANGUAGE plpgsql`,
    );
    await sql(db, `CREATE TRIGGER ${name}_tr BEFORE ${event} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}_fn()`);
  } else {
    await sql(
      db,
      `CREATE TRIGGER ${name}_tr BEFORE ${event} ON ${table} FOR EACH ROW BEGIN
         IF ${when} THEN SET NEW.${column} = ${value}; END IF;
       END`,
    );
  }
  return {
    drop: async () => {
      await sql(db, `DROP TRIGGER ${name}_tr${db.dialect === 'postgres' ? ` ON ${table}` : ''}`);
      if (db.dialect === 'postgres') await sql(db, `DROP FUNCTION ${name}_fn()`);
    },
  };
}
