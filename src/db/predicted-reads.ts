/**
 * Reads answered before the server is asked, proved by the server before
 * COMMIT (docs/adr/0033-phase-b-in-one-round-trip.md).
 *
 * Contract:
 * - `RecordedAnswers` keeps the latest answer of every SELECT a transaction
 *   sends, a locking read under its plain form (`plainForm`: the same
 *   statement without its trailing lock clause, which answers the same rows
 *   once they are locked), and drops every answer that reads a table a later
 *   write of that transaction may touch (the rule of src/db/early-reads.ts).
 *   What is left when the transaction commits is what those rows held at its
 *   COMMIT, for every row it held locked — a prediction of what the next
 *   transaction will read there, and no more: nothing relies on it unproved.
 * - `valueFence(dialect, read, rows)` is a SELECT that answers exactly one
 *   row when the plain read `read` answers exactly `rows` (the same multiset:
 *   as many rows, each equal column by column, byte for byte, to one
 *   predicted), and none otherwise; null when a value cannot be compared by
 *   value in SQL (a time, a document, a buffer), or a column name is not a
 *   plain identifier. Sent as a fence (`Tx.expect(fence, 1, ..)`), it fails
 *   the transaction before COMMIT when the prediction was wrong.
 */
import type { Dialect } from './config';
import type { SqlParam, Statement, StatementResult } from './batch';

/** The trailing lock clause of a locking read (`FOR UPDATE`, `FOR SHARE`, MySQL's `LOCK IN SHARE MODE`). */
const LOCK_CLAUSE = /\s+(?:FOR\s+(?:UPDATE|SHARE)|LOCK\s+IN\s+SHARE\s+MODE)\s*$/i;
const SELECT = /^\s*SELECT\b/i;
const READ_TABLES = /\b(?:FROM|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)/gi;
const WRITE_TABLES = /\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+([A-Za-z_][A-Za-z0-9_]*)/gi;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

const namesIn = (sql: string, pattern: RegExp) =>
  new Set([...sql.matchAll(pattern)].map((m) => (m[1] as string).toLowerCase()));

/** The plain read a SELECT stands for: itself, or without its trailing lock clause; null for anything else. */
export function plainForm(sql: string): string | null {
  if (!SELECT.test(sql) || /pg_advisory/i.test(sql)) return null;
  return sql.replace(LOCK_CLAUSE, '');
}

/** The key of a statement's plain form (SQL and parameters), or null when it is not a read. */
export function plainKey(sql: string, params: readonly SqlParam[]): string | null {
  const plain = plainForm(sql);
  return plain === null ? null : readKey(plain, params);
}

export function readKey(sql: string, params: readonly SqlParam[]): string {
  return `${sql}\u0000${JSON.stringify(params, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`;
}

/** A prediction: the rows a plain read is expected to answer, by its key (`plainKey`). */
export type Predictions = ReadonlyMap<string, readonly Record<string, unknown>[]>;

export class RecordedAnswers {
  private readonly latest = new Map<string, { answer: Promise<StatementResult>; tables: Set<string> }>();

  /** Records the answer of `sql` (any statement: only a SELECT is kept) and drops what a write may have changed. */
  record(sql: string, params: readonly SqlParam[], answer: Promise<StatementResult> | undefined): void {
    const plain = plainForm(sql);
    if (plain === null) {
      this.issued(sql);
      return;
    }
    if (answer === undefined) return;
    answer.catch(() => undefined);
    this.latest.set(readKey(plain, params), { answer, tables: namesIn(plain, READ_TABLES) });
  }

  /** A copy of what is recorded now, which later statements of the transaction leave as it is. */
  snapshot(): RecordedAnswers {
    const copy = new RecordedAnswers();
    for (const [key, kept] of this.latest) copy.latest.set(key, kept);
    return copy;
  }

  /** A statement that may write: drops every answer reading a table it names (all of them when it names none). */
  issued(sql: string): void {
    if (this.latest.size === 0 || SELECT.test(sql)) return;
    const written = namesIn(sql, WRITE_TABLES);
    for (const [key, kept] of this.latest) {
      if (written.size === 0 || [...kept.tables].some((t) => written.has(t))) this.latest.delete(key);
    }
  }

  /** The answers still standing, once every one has arrived. */
  async settled(): Promise<Map<string, Record<string, unknown>[]>> {
    const out = new Map<string, Record<string, unknown>[]>();
    await Promise.all(
      [...this.latest].map(async ([key, kept]) => {
        out.set(key, (await kept.answer).rows);
      }),
    );
    return out;
  }
}

/** One column's comparison with its predicted value, or null when SQL cannot compare it by value. */
function columnMatch(dialect: Dialect, column: string, value: unknown, params: SqlParam[]): string | null {
  if (value === null || value === undefined) return `x.${column} IS NULL`;
  if (typeof value === 'number' || typeof value === 'boolean') {
    if (typeof value === 'number' && !Number.isFinite(value)) return null;
    params.push(value);
    return `x.${column} = ?`;
  }
  if (typeof value === 'string') {
    params.push(value);
    // MySQL compares text with PAD SPACE even under a binary collation: BINARY compares the bytes.
    return dialect === 'mysql' ? `BINARY x.${column} = ?` : `x.${column} = ?`;
  }
  return null;
}

export function valueFence(
  dialect: Dialect,
  read: Statement,
  rows: readonly Record<string, unknown>[],
): Statement | null {
  if (plainForm(read.sql) !== read.sql) return null;
  // Each distinct predicted row, with how many times it is predicted.
  const distinct = new Map<string, { row: Record<string, unknown>; times: number }>();
  for (const row of rows) {
    const key = JSON.stringify(Object.entries(row));
    const seen = distinct.get(key);
    if (seen) seen.times++;
    else distinct.set(key, { row, times: 1 });
  }
  const matchParams: SqlParam[] = [];
  const counts: string[] = [];
  const checks: string[] = [`y.n = ${rows.length}`];
  let i = 0;
  for (const { row, times } of distinct.values()) {
    const conds: string[] = [];
    for (const [column, value] of Object.entries(row)) {
      if (!IDENTIFIER.test(column)) return null;
      const cond = columnMatch(dialect, column, value, matchParams);
      if (cond === null) return null;
      conds.push(cond);
    }
    counts.push(`SUM(CASE WHEN ${conds.length > 0 ? conds.join(' AND ') : '1 = 1'} THEN 1 ELSE 0 END) AS c${i}`);
    checks.push(`y.c${i} = ${times}`);
    i++;
  }
  return {
    sql: `SELECT 1 AS ok FROM (SELECT ${['COUNT(*) AS n', ...counts].join(', ')} FROM (${read.sql}) x) y WHERE ${checks.join(' AND ')}`,
    params: [...matchParams, ...read.params],
  };
}
