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
 * ADR 0022): a write is followed by a SELECT that overflows BIGINT UNSIGNED
 * (error 1690) when `ROW_COUNT()` — the write's affected rows, as the driver
 * counts them — is not `affected`; the server stops the multi-statement
 * there, COMMIT included. A SELECT is checked in one statement (ADR 0044):
 * the same overflow over `COUNT(*)` of it as a derived table, whose locking
 * clause, if any, locks the rows it reads as the SELECT alone would. A
 * write's check right before a checked SELECT is a column of that SELECT's
 * statement, before the SELECT's own (ADR 0046): `ROW_COUNT()` there is still
 * the write's, and each column's overflow names its own statement. An
 * aggregate fence — `SELECT 1 AS fenced FROM ... HAVING <condition>`, no
 * GROUP BY: one row when the condition holds, none otherwise — is checked
 * without the derived table, which MariaDB would materialize in a temporary
 * table at every run (ADR 0047): the same columns over its own FROM, its
 * HAVING condition standing for the row count. The error
 * text quotes the failing expression, whose literal names the statement's
 * index (the count itself is not in it: reported as NaN).
 *
 * `checkedStatements(dialect, unsent)` is what stands for a transaction's
 * unsent statements in the COMMIT's round trip (a plain one as it is), and
 * how many of those statements stand for each.
 */
import type { Dialect } from './config';
import type { Statement } from './statement';

const MARK = 'taskledger_expect_';

/** A plain or locking SELECT: checked on the rows it answers instead of the rows it changed. */
const isSelect = (sql: string) => /^\s*SELECT\b/i.test(sql);

/**
 * An aggregate fence (`SELECT 1 AS fenced FROM <from> HAVING <condition>`, with no GROUP BY and no locking clause,
 * so one row or none): its two parts, or null for any other SELECT.
 */
function aggregateFence(sql: string): { from: string; condition: string } | null {
  const m = /^\s*SELECT 1 AS fenced FROM ([\s\S]+?)\s+HAVING ([\s\S]+)$/.exec(sql.trimEnd());
  if (!m || /\bGROUP\s+BY\b/i.test(m[1]!) || /\b(FOR\s+UPDATE|FOR\s+SHARE|LOCK\s+IN\s+SHARE\s+MODE)\s*$/i.test(m[2]!))
    return null;
  return { from: m[1]!, condition: m[2]! };
}

export function checkedSql(sql: string, affected: number, index: number): string {
  return (
    `WITH checked AS (${sql.trimEnd()}${isSelect(sql) ? '' : ' RETURNING 1'}) ` +
    `SELECT CAST(CASE WHEN count(*) = ${affected} THEN '1' ELSE count(*) || ':${MARK}${index}' END AS integer) AS ok FROM checked`
  );
}

/** One unsent statement: `affected` set for a checked one (a compare-and-set or a fence), unset for a plain one. */
export interface UnsentStatement {
  stmt: Statement;
  affected?: number;
}

/** The statement's mark first: the server's error quotes the expression's start only (an aggregate fence's is long). */
const fails = (count: string, affected: number, index: number) =>
  `~0 + ('${MARK}${index}' <> '' AND ${count} <> ${affected})`;

export function checkedStatements(
  dialect: Dialect,
  unsent: readonly UnsentStatement[],
): { statements: Statement[]; counts: number[] } {
  const statements: Statement[] = [];
  const counts: number[] = [];
  for (let i = 0; i < unsent.length; i++) {
    const { stmt, affected } = unsent[i]!;
    if (affected === undefined) {
      statements.push(stmt);
      counts.push(1);
    } else if (dialect === 'postgres') {
      statements.push({ sql: checkedSql(stmt.sql, affected, i), params: stmt.params });
      counts.push(1);
    } else if (isSelect(stmt.sql)) {
      statements.push(mysqlFence(stmt, affected, i));
      counts.push(1);
    } else {
      const rowCount = fails('ROW_COUNT()', affected, i);
      const next = unsent[i + 1];
      statements.push(stmt);
      if (next?.affected !== undefined && isSelect(next.stmt.sql)) {
        statements.push(mysqlFence(next.stmt, next.affected, i + 1, rowCount));
        counts.push(1, 1);
        i++;
      } else {
        statements.push({ sql: `SELECT ${rowCount} AS ok`, params: [] });
        counts.push(2);
      }
    }
  }
  return { statements, counts };
}

/**
 * The MySQL fence of checked SELECT `index`, after the check of the write before it (`written`) if any, as columns
 * evaluated left to right: over the SELECT as a derived table, or, for an aggregate fence, over its own FROM with its
 * condition standing for the row count. That condition's parameters then come first, as its text now does (every
 * `?` in a statement's text is a parameter, as `toDialectSql` has it). A check in a HAVING would not do: MariaDB
 * evaluates a HAVING term without a column, `ROW_COUNT()`'s, when it prepares the statement.
 */
function mysqlFence(stmt: Statement, affected: number, index: number, written?: string): Statement {
  const aggregate = aggregateFence(stmt.sql);
  const own = fails(aggregate ? `(CASE WHEN ${aggregate.condition} THEN 1 ELSE 0 END)` : 'COUNT(*)', affected, index);
  const columns = written === undefined ? own : `${written} AS written, ${own}`;
  if (!aggregate)
    return { sql: `SELECT ${columns} AS ok FROM (${stmt.sql.trimEnd()}) AS checked`, params: stmt.params };
  const inFrom = aggregate.from.split('?').length - 1;
  return {
    sql: `SELECT ${columns} AS ok FROM ${aggregate.from}`,
    params: [...stmt.params.slice(inFrom), ...stmt.params.slice(0, inFrom)],
  };
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
