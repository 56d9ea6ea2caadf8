/**
 * Database faults a test can switch on, as triggers on the real tables (both
 * dialects):
 * - `deadlockOn`: while on, every `event` (UPDATE or INSERT) on `table` whose
 *   new row `when` admits (SQL over NEW, and OLD for updates) fails as a
 *   deadlock would, so the command restarts until its retries are used up
 *   (`retry_exhausted`: a database fault, not a ledger answer); `off()` ends
 *   the fault, `drop()` removes the trigger;
 * - `rewriteOn`: the row a command writes is not the row it reads back;
 * - `killWhileInserting`: the connection inserting a row is killed from
 *   outside while a trigger holds that insert.
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

/**
 * Runs `fn` while every insert into `table` whose new row `when` admits waits two seconds in a trigger, and kills the
 * connection running it from outside, once; answers how many connections were killed (1, or 0 when none was found
 * in five seconds). PostgreSQL: the trigger publishes its backend's PID in a sequence (not rolled back, seen at once).
 * MariaDB: the connection is found in the process list by `marker` (a value in its statements) or by its own sleep.
 */
export async function killWhileInserting(
  db: Db,
  table: string,
  when: string,
  marker: string,
  fn: () => Promise<unknown>,
): Promise<number> {
  const pg = db.dialect === 'postgres';
  const name = `tl_slow_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  // A sleep of its own (two seconds and a few random thousandths): the process list may show the trigger's
  // statement instead of the command's, and another test file's trigger must not match it.
  const sleep = `SLEEP(2.${String(Math.floor(Math.random() * 1e5)).padStart(5, '0')})`;
  if (pg) await sql(db, `CREATE SEQUENCE ${name}_pid`);
  const drop = await rowTrigger(
    db,
    name,
    table,
    'INSERT',
    `IF ${when} THEN PERFORM setval('${name}_pid', pg_backend_pid()); PERFORM pg_sleep(2); END IF;`,
    `IF ${when} THEN DO ${sleep}; END IF;`,
  );
  try {
    const killed = (async () => {
      const find = pg
        ? `SELECT last_value AS id FROM ${name}_pid WHERE is_called`
        : `SELECT id FROM information_schema.processlist WHERE (info LIKE ? OR info LIKE ?) AND id <> CONNECTION_ID()`;
      for (let i = 0; i < 500; i++) {
        const [row] = await sql<{ id: number | string }>(db, find, pg ? [] : [`%${marker}%`, `%${sleep}%`]);
        if (row) {
          if (pg) await sql(db, 'SELECT pg_terminate_backend(CAST(? AS integer))', [String(row.id)]);
          else await sql(db, `KILL CONNECTION ${Number(row.id)}`);
          return 1;
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      return 0;
    })();
    await fn();
    return await killed;
  } finally {
    await drop();
    if (pg) await sql(db, `DROP SEQUENCE ${name}_pid`);
  }
}
