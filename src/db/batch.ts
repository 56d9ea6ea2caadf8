/**
 * Several statements in one round trip (docs/adr/0006-statement-batches.md).
 *
 * Contract: `sendBatch(qr, dialect, statements, { begin })` sends the
 * statements, in order, as one multi-statement text on the query runner's own
 * connection and returns one result (rows and affected count) per statement.
 * With `begin`, the text starts with `START TRANSACTION`, so the transaction
 * opens in the same round trip. The server runs the statements strictly in
 * order, so row locks are taken in exactly the order of the list; the first
 * failing statement stops the rest and the error propagates (as TypeORM's
 * `QueryFailedError`, with the driver error attached, so restart and unique
 * detection see the same shape as for a single statement).
 *
 * Parameters: MySQL interpolates `?` on the client (mysql2's `query`, as
 * TypeORM's single statements do; the pool runs with `multipleStatements`).
 * PostgreSQL's extended protocol takes one statement per message, so a batch
 * uses the simple protocol with every parameter inlined as a literal:
 * strings through the driver's `escapeLiteral`, finite numbers, bigints,
 * booleans and null. The inliner refuses anything else; `Tx` checks first and
 * sends a batch holding such a value one statement per round trip instead.
 */
import pg from 'pg';
import { QueryFailedError, type QueryRunner } from 'typeorm';
import type { Dialect } from './config';

/** A bound value (`?` placeholder); re-exported by tx.ts, where callers import it. */
export type SqlParam = string | number | bigint | boolean | null | Date | Buffer;

export interface Statement {
  sql: string;
  params: readonly SqlParam[];
}

export interface StatementResult {
  rows: Record<string, unknown>[];
  affected: number;
  /** PostgreSQL's command tag (`COMMIT`, or `ROLLBACK` for a COMMIT of a failed transaction); absent on MySQL. */
  command?: string;
}

function pgLiteral(value: SqlParam): string {
  if (value === null) return 'NULL';
  if (typeof value === 'string') return pg.escapeLiteral(value);
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  throw new TypeError(`a batched statement cannot inline a ${Object.prototype.toString.call(value)} parameter`);
}

/** The statement with each `?` replaced by its parameter as a PostgreSQL literal. */
export function inlinePgParams(sql: string, params: readonly SqlParam[]): string {
  const parts = sql.split('?');
  if (parts.length - 1 !== params.length) {
    throw new TypeError(`statement has ${parts.length - 1} placeholders but ${params.length} parameters: ${sql}`);
  }
  let out = parts[0] ?? '';
  for (let i = 0; i < params.length; i++) out += pgLiteral(params[i] as SqlParam) + parts[i + 1];
  return out;
}

/** True when every parameter can be inlined (a PostgreSQL batch refuses the rest). */
export function inlinable(params: readonly SqlParam[]): boolean {
  return params.every(
    (p) =>
      p === null ||
      typeof p === 'string' ||
      typeof p === 'bigint' ||
      typeof p === 'boolean' ||
      (typeof p === 'number' && Number.isFinite(p)),
  );
}

interface PgResult {
  rows?: Record<string, unknown>[];
  rowCount?: number | null;
  command?: string;
}

interface MysqlHeader {
  affectedRows?: number;
}

const BEGIN = 'START TRANSACTION';

export async function sendBatch(
  qr: QueryRunner,
  dialect: Dialect,
  statements: readonly Statement[],
  options: { begin: boolean },
): Promise<StatementResult[]> {
  const conn = (await qr.connect()) as unknown;
  const texts = statements.map((s) => (dialect === 'postgres' ? inlinePgParams(s.sql, s.params) : s.sql));
  if (options.begin) texts.unshift(BEGIN);
  const text = texts.join(';\n');
  const params = dialect === 'mysql' ? statements.flatMap((s) => s.params) : [];
  let raw: unknown[];
  try {
    if (dialect === 'postgres') {
      const res = (await (conn as pg.PoolClient).query(text)) as unknown;
      raw = Array.isArray(res) ? res : [res];
    } else {
      const promiseConn = (
        conn as { promise(): { query(sql: string, values: unknown[]): Promise<[unknown]> } }
      ).promise();
      const [res] = await promiseConn.query(text, params);
      raw = texts.length === 1 ? [res] : (res as unknown[]);
    }
  } catch (err) {
    throw new QueryFailedError(text, params, err as Error);
  }
  if (raw.length !== texts.length) {
    throw new Error(`a batch of ${texts.length} statements returned ${raw.length} results`);
  }
  const results = raw.map((r): StatementResult => {
    if (dialect === 'postgres') {
      const p = r as PgResult;
      return { rows: p.rows ?? [], affected: Number(p.rowCount ?? 0), command: p.command };
    }
    if (Array.isArray(r)) return { rows: r as Record<string, unknown>[], affected: 0 };
    return { rows: [], affected: Number((r as MysqlHeader).affectedRows ?? 0) };
  });
  return options.begin ? results.slice(1) : results;
}
