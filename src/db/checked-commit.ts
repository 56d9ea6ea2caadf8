/**
 * Compare-and-sets sent with COMMIT (`Tx.expect` writes still unsent when
 * the transaction body ends; docs/adr/0006-statement-batches.md).
 *
 * PostgreSQL:
 * Contract: `checkedSql(sql, affected, index)` wraps one INSERT/UPDATE/DELETE
 * (inlined PostgreSQL text, no RETURNING of its own) so that it FAILS when it
 * does not change exactly `affected` rows — or one SELECT, locking or not,
 * so that it fails when it does not answer exactly `affected` rows (a fence
 * checked on the server, ADR 0028): the server then skips the rest of
 * the batch, COMMIT included, and the runner rolls back. The failure is an
 * `invalid_text_representation` error whose text carries the row count and
 * the statement's index; `checkedFailure(err)` reads them back (null for any
 * other error), so the runner reports the caller's own mismatch error.
 * The cast depends on `count(*)`, so the planner cannot fold the failing
 * branch into an error at plan time.
 *
 * MySQL/MariaDB (no statement fails on a row count outside a stored program,
 * ADR 0022): `checkedStatementsMysql(stmt, affected, index)` is the write
 * followed by a SELECT that overflows BIGINT UNSIGNED (error 1690) when
 * `ROW_COUNT()` — the write's affected rows, as the driver counts them — is
 * not `affected`; the server stops the multi-statement there, COMMIT
 * included. A SELECT is checked in one statement (ADR 0044): the same
 * overflow over `COUNT(*)` of it as a derived table, whose locking clause, if
 * any, locks the rows it reads as the SELECT alone would. The error text
 * quotes the expression, whose literal names the statement's index (the count
 * itself is not in it: reported as NaN). `checkedStatementCount` says how
 * many statements stand for one checked statement.
 */
import type { Dialect } from './config';
import type { Statement } from './statement';

const MARK = 'taskledger_expect_';

/** A plain or locking SELECT: checked on the rows it answers instead of the rows it changed. */
const isSelect = (sql: string) => /^\s*SELECT\b/i.test(sql);

export function checkedSql(sql: string, affected: number, index: number): string {
  return (
    `WITH checked AS (${sql.trimEnd()}${isSelect(sql) ? '' : ' RETURNING 1'}) ` +
    `SELECT CAST(CASE WHEN count(*) = ${affected} THEN '1' ELSE count(*) || ':${MARK}${index}' END AS integer) AS ok FROM checked`
  );
}

export function checkedStatementsMysql(stmt: Statement, affected: number, index: number): Statement[] {
  const fails = (count: string) => `~0 + (${count} <> ${affected} AND '${MARK}${index}' <> '')`;
  if (isSelect(stmt.sql)) {
    return [{ sql: `SELECT ${fails('COUNT(*)')} AS ok FROM (${stmt.sql.trimEnd()}) AS checked`, params: stmt.params }];
  }
  return [stmt, { sql: `SELECT ${fails('ROW_COUNT()')} AS ok`, params: [] }];
}

/** The statements that stand for one checked statement: one on PostgreSQL and for a MySQL SELECT, else two. */
export function checkedStatementCount(dialect: Dialect, sql: string): number {
  return dialect === 'postgres' || isSelect(sql) ? 1 : 2;
}

export function checkedFailure(err: unknown): { index: number; affected: number } | null {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e && typeof e === 'object' && !seen.has(e);) {
    seen.add(e);
    const message = (e as { message?: unknown }).message;
    const m = typeof message === 'string' ? /"(\d+):taskledger_expect_(\d+)"/.exec(message) : null;
    if (m) return { affected: Number(m[1]), index: Number(m[2]) };
    const my = typeof message === 'string' ? /'taskledger_expect_(\d+)'/.exec(message) : null;
    if (my) return { affected: Number.NaN, index: Number(my[1]) };
    e = (e as { driverError?: unknown }).driverError ?? (e as { cause?: unknown }).cause;
  }
  return null;
}
