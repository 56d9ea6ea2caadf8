/**
 * Database administration helpers: create or recreate the database named in a
 * URL, by connecting to the server's maintenance database. Used by
 * `taskledger migrate --create`, the demo and the test setup.
 */
import pg from 'pg';
import mysql from 'mysql2/promise';
import { dialectOf } from './config';

function splitUrl(url: string): { serverUrl: string; database: string } {
  const u = new URL(url);
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_]+$/.test(database)) {
    throw new Error(`database name "${database}" must be letters, digits and underscores`);
  }
  return { serverUrl: url, database };
}

async function withServer<T>(url: string, fn: (q: (sql: string) => Promise<unknown>) => Promise<T>): Promise<T> {
  const { database } = splitUrl(url);
  if (dialectOf(url) === 'postgres') {
    const u = new URL(url);
    u.pathname = '/postgres';
    const client = new pg.Client({ connectionString: u.toString() });
    await client.connect();
    try {
      return await fn((sql) => client.query(sql.replaceAll('$DB', `"${database}"`)));
    } finally {
      await client.end();
    }
  }
  const u = new URL(url.replace(/^mariadb:/, 'mysql:'));
  u.pathname = '/';
  const conn = await mysql.createConnection(u.toString());
  try {
    return await fn((sql) => conn.query(sql.replaceAll('$DB', `\`${database}\``)));
  } finally {
    await conn.end();
  }
}

export async function ensureDatabase(url: string): Promise<void> {
  const { database } = splitUrl(url);
  if (dialectOf(url) === 'postgres') {
    await withServer(url, async (q) => {
      const res = (await q(`SELECT 1 FROM pg_database WHERE datname = '${database}'`)) as { rowCount: number };
      if (res.rowCount === 0) await q('CREATE DATABASE $DB');
    });
    return;
  }
  await withServer(url, (q) => q('CREATE DATABASE IF NOT EXISTS $DB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin'));
}

export async function recreateDatabase(url: string): Promise<void> {
  if (dialectOf(url) === 'postgres') {
    await withServer(url, async (q) => {
      await q('DROP DATABASE IF EXISTS $DB WITH (FORCE)');
      await q('CREATE DATABASE $DB');
    });
    return;
  }
  await withServer(url, async (q) => {
    await q('DROP DATABASE IF EXISTS $DB');
    await q('CREATE DATABASE $DB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin');
  });
}

export async function dropDatabase(url: string): Promise<void> {
  if (dialectOf(url) === 'postgres') {
    await withServer(url, (q) => q('DROP DATABASE IF EXISTS $DB WITH (FORCE)'));
    return;
  }
  await withServer(url, (q) => q('DROP DATABASE IF EXISTS $DB'));
}
