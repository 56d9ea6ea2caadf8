/**
 * Several statements in one round trip (docs/adr/0006-statement-batches.md).
 *
 * Contract: `sendBatch(qr, dialect, statements, { begin })` sends the
 * statements, in order, in one round trip on the query runner's own
 * connection and returns one result (rows and affected count) per statement.
 * With `begin`, the batch starts with `START TRANSACTION`, so the transaction
 * opens in the same round trip. The server runs the statements strictly in
 * order, so row locks are taken in exactly the order of the list; the first
 * failing statement stops the rest and the error propagates (as TypeORM's
 * `QueryFailedError`, with the driver error attached, so restart and unique
 * detection see the same shape as for a single statement).
 *
 * PostgreSQL: one pipeline of the extended protocol (src/db/pg-pipeline.ts,
 * ADR 0053) — a statement that recurs is prepared once per connection and
 * bound with its values (src/db/pg-prepared.ts); one not prepared runs as
 * the unnamed statement with its values inlined as literals (strings through
 * the driver's `escapeLiteral`, finite numbers, bigints, booleans and null).
 * The inliner refuses anything else; `Tx` checks first and sends a batch
 * holding such a value one statement per round trip instead.
 * MySQL: one multi-statement text; mysql2 interpolates `?` on the client
 * (as TypeORM's single statements do; the pool runs with `multipleStatements`).
 * A statement that recurs runs as `EXECUTE ... USING` of one prepared once
 * per connection (src/db/mysql-prepared.ts), with the values the driver fills
 * in; the server skips parsing. A MySQL statement
 * alone, and COMMIT or a session's settings, go the same way, as a batch of one
 * sent as it is (`prepare: false`): through mysql2's callback API, never its
 * promise wrapper (ADR 0045).
 */
import type pg from 'pg';
import { QueryFailedError, type QueryRunner } from 'typeorm';
import type { Dialect } from './config';
import { mysqlBatchTexts } from './mysql-prepared';
import { runPipeline } from './pg-pipeline';
import { BEGIN, pgBatch } from './pg-prepared';
import type { SqlParam, Statement } from './statement';

export { inlinable, inlinePgParams } from './statement';

export type { SqlParam, Statement };

export interface StatementResult {
  rows: Record<string, unknown>[];
  affected: number;
  /** PostgreSQL's command tag (`COMMIT`, or `ROLLBACK` for a COMMIT of a failed transaction); absent on MySQL. */
  command?: string;
}

interface PgResult {
  rows?: Record<string, unknown>[];
  rowCount?: number | null;
  command?: string;
}

interface MysqlHeader {
  affectedRows?: number;
}

/** mysql2's connection, as TypeORM's query runner holds it (its callback API). */
interface MysqlCallbackConnection {
  query(sql: string, values: unknown[], cb: (err: Error | null, answer: unknown) => void): unknown;
}

/**
 * One text on a MySQL connection through mysql2's callback API. Its promise wrapper (which TypeORM's `query`
 * uses) captures a stack trace on every call, ~1.4 % of a worker's samples on MariaDB; the caller's
 * QueryFailedError carries the text instead.
 */
function mysqlQuery(conn: object, text: string, params: readonly unknown[]): Promise<unknown> {
  return new Promise((resolve, reject) => {
    (conn as MysqlCallbackConnection).query(text, [...params], (err, answer) => (err ? reject(err) : resolve(answer)));
  });
}

export async function sendBatch(
  qr: QueryRunner,
  dialect: Dialect,
  statements: readonly Statement[],
  /** `prepare: false` sends MySQL statements as they are, never as `EXECUTE` (a statement alone: ADR 0045). */
  options: { begin: boolean; prepare?: boolean },
): Promise<StatementResult[]> {
  const conn = (await qr.connect()) as object;
  if (dialect === 'postgres') return sendPgBatch(conn as pg.PoolClient, statements, options.begin);
  // The driver fills every `?` of the whole text in order: the PREPAREs' texts first, then the body's values.
  const prepared =
    options.prepare === false
      ? { lead: [], body: statements, settle: () => undefined }
      : mysqlBatchTexts(conn, statements);
  const lead = [...(options.begin ? [BEGIN] : []), ...prepared.lead.map((s) => s.sql)];
  const texts = [...lead, ...prepared.body.map((s) => s.sql)];
  const params = [...prepared.lead, ...prepared.body].flatMap((s) => s.params);
  const text = texts.join(';\n');
  let raw: unknown[];
  try {
    const res = await mysqlQuery(conn, text, params);
    raw = texts.length === 1 ? [res] : (res as unknown[]);
  } catch (err) {
    prepared.settle(false, err);
    throw new QueryFailedError(text, params, err as Error);
  }
  prepared.settle(true);
  if (raw.length !== texts.length) {
    throw new Error(`a batch of ${texts.length} statements returned ${raw.length} results`);
  }
  const results = raw.map((r): StatementResult => {
    // A SELECT counts the rows it answered, as PostgreSQL's rowCount does (a fence checked by count, ADR 0028).
    if (Array.isArray(r)) return { rows: r as Record<string, unknown>[], affected: r.length };
    return { rows: [], affected: Number((r as MysqlHeader).affectedRows ?? 0) };
  });
  return results.slice(lead.length);
}

/** A PostgreSQL batch: one pipeline of the extended protocol (src/db/pg-pipeline.ts, ADR 0053). */
async function sendPgBatch(
  client: pg.PoolClient,
  statements: readonly Statement[],
  begin: boolean,
): Promise<StatementResult[]> {
  const batch = pgBatch(client, statements, begin);
  let raw: unknown[];
  try {
    const res = await runPipeline(client, batch.steps, batch.describe);
    raw = Array.isArray(res) ? res : [res];
  } catch (err) {
    batch.settle(false, err);
    throw new QueryFailedError(batch.describe(), [], err as Error);
  }
  batch.settle(true);
  const expected = batch.leading + statements.length;
  if (raw.length !== expected) throw new Error(`a batch of ${expected} statements returned ${raw.length} results`);
  const results: StatementResult[] = [];
  for (let i = batch.leading; i < raw.length; i++) {
    const p = raw[i] as PgResult;
    results.push({ rows: p.rows ?? [], affected: Number(p.rowCount ?? 0), command: p.command });
  }
  return results;
}
