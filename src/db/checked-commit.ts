/**
 * Compare-and-sets sent with COMMIT on PostgreSQL (`Tx.expect` writes still
 * unsent when the transaction body ends; docs/adr/0006-statement-batches.md).
 *
 * Contract: `checkedSql(sql, affected, index)` wraps one INSERT/UPDATE/DELETE
 * (inlined PostgreSQL text, no RETURNING of its own) so that it FAILS when it
 * does not change exactly `affected` rows: the server then skips the rest of
 * the batch, COMMIT included, and the runner rolls back. The failure is an
 * `invalid_text_representation` error whose text carries the row count and
 * the statement's index; `checkedFailure(err)` reads them back (null for any
 * other error), so the runner reports the caller's own mismatch error.
 * The cast depends on `count(*)`, so the planner cannot fold the failing
 * branch into an error at plan time.
 */
const MARK = 'taskledger_expect_';

export function checkedSql(sql: string, affected: number, index: number): string {
  return (
    `WITH checked AS (${sql.trimEnd()} RETURNING 1) ` +
    `SELECT CAST(CASE WHEN count(*) = ${affected} THEN '1' ELSE count(*) || ':${MARK}${index}' END AS integer) AS ok FROM checked`
  );
}

export function checkedFailure(err: unknown): { index: number; affected: number } | null {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e && typeof e === 'object' && !seen.has(e);) {
    seen.add(e);
    const message = (e as { message?: unknown }).message;
    const m = typeof message === 'string' ? /"(\d+):taskledger_expect_(\d+)"/.exec(message) : null;
    if (m) return { affected: Number(m[1]), index: Number(m[2]) };
    e = (e as { driverError?: unknown }).driverError ?? (e as { cause?: unknown }).cause;
  }
  return null;
}
