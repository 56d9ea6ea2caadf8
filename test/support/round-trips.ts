/**
 * Counts database round trips in a test: every call into the driver's
 * `query` (pg's Client, mysql2's connection) is one request on the wire — a
 * batch of statements is one call, a parameterised statement is one call.
 * Only counts; the statements still run against the real database.
 */
import mysql from 'mysql2';
import pg from 'pg';
import { vi } from 'vitest';
import { preparedTextOf } from '../../src/db/prepared-texts';
import type { Db } from '../../src/db/tx';

function textOf(q: unknown): string {
  if (typeof q === 'string') return q;
  const o = q as { sql?: string; text?: string } | null;
  return String(o?.sql ?? o?.text ?? '');
}

/**
 * Starts counting the calls whose SQL or values mention `marker` (every
 * call when it is omitted), keeping each one's text and values. On
 * PostgreSQL a statement that recurs is sent as `EXECUTE tl_<n>(<values>)`
 * (src/db/pg-prepared.ts): match values, not SQL. Undo with
 * `vi.restoreAllMocks()`.
 */
export function countRoundTrips(db: Db, marker?: string): { readonly calls: number; readonly texts: string[] } {
  const seen = { calls: 0, texts: [] as string[] };
  const proto = (db.dialect === 'postgres' ? pg.Client.prototype : mysql.Connection.prototype) as unknown as {
    query: (...args: unknown[]) => unknown;
  };
  const original = proto.query;
  vi.spyOn(proto, 'query').mockImplementation(function (this: unknown, ...args: unknown[]) {
    // MySQL sends the SQL with `?` placeholders and the values beside it.
    const values = Array.isArray(args[1]) ? (args[1] as unknown[]).join(' ') : '';
    const text = `${textOf(args[0])} ${values}`;
    if (marker === undefined || text.includes(marker)) {
      seen.calls++;
      seen.texts.push(text);
    }
    return original.apply(this, args);
  });
  return seen;
}

/** Batch texts that are not a caller's statement: the prepares and transaction control around them. */
const NOT_A_STATEMENT = /^(PREPARE|DEALLOCATE|START|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET)\b/i;

/**
 * Starts keeping every statement sent from now on, each as its caller wrote it: a batch's texts one by one
 * (src/db/batch.ts joins them with `;\n`), a prepared statement's `EXECUTE tl_<n>` resolved to the text it runs
 * (`preparedTextOf`), the prepares and transaction control left out. Undo with `vi.restoreAllMocks()`.
 */
export function sentStatements(db: Db): string[] {
  const sent: string[] = [];
  const proto = (db.dialect === 'postgres' ? pg.Client.prototype : mysql.Connection.prototype) as unknown as {
    query: (...args: unknown[]) => unknown;
  };
  const original = proto.query;
  vi.spyOn(proto, 'query').mockImplementation(function (this: unknown, ...args: unknown[]) {
    for (const part of textOf(args[0]).split(';\n')) {
      const text = part.trim();
      if (text === '' || NOT_A_STATEMENT.test(text)) continue;
      const name = /^EXECUTE (tl_\w+)/.exec(text)?.[1];
      sent.push(name === undefined ? text : (preparedTextOf(name) ?? text));
    }
    return original.apply(this, args);
  });
  return sent;
}
