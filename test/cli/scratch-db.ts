/**
 * A scratch database beside the project's test database, for tests that must
 * watch the CLI create and migrate a database from nothing. Same server and
 * credentials as TASKLEDGER_DB_URL, another database name.
 */
import mysql from 'mysql2/promise';
import pg from 'pg';
import { dialectOf, type Dialect } from '../../src/db/config';

/** The project's URL with `suffix` appended to its database name (`taskledger_test` -> `taskledger_test_cli`). */
export function siblingDatabaseUrl(url: string, suffix: string): string {
  const u = new URL(url);
  u.pathname = `${u.pathname}${suffix}`;
  return u.toString();
}

/** Drops the database named in `url` if it exists (src/db/admin.ts only creates). */
export async function dropDatabase(url: string): Promise<void> {
  const u = new URL(url);
  const database = decodeURIComponent(u.pathname.slice(1));
  if (!/^[A-Za-z0-9_]+$/.test(database)) throw new Error(`unexpected database name "${database}"`);
  const dialect: Dialect = dialectOf(url);
  if (dialect === 'postgres') {
    u.pathname = '/postgres';
    const client = new pg.Client({ connectionString: u.toString() });
    await client.connect();
    try {
      await client.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    } finally {
      await client.end();
    }
    return;
  }
  const server = new URL(url.replace(/^mariadb:/, 'mysql:'));
  server.pathname = '/';
  const conn = await mysql.createConnection(server.toString());
  try {
    await conn.query(`DROP DATABASE IF EXISTS \`${database}\``);
  } finally {
    await conn.end();
  }
}
