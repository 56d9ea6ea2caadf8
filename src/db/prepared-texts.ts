/**
 * The statement texts this process prepares, shared by both dialects' prepared batches (src/db/pg-prepared.ts,
 * src/db/mysql-prepared.ts).
 *
 * Contract: `preparedNameFor(sql)` counts a text and answers its name (`tl_<n>`) once it has been seen twice, else
 * null. A text that is not a SELECT/INSERT/UPDATE/DELETE/WITH, one marked `unpreparable`, or any text beyond the
 * first `MAX_TEXTS` is never named. A text built with values in it therefore never fills a server's memory.
 * Names are per process. Each connection keeps its own record of which names it holds.
 */
import { driverErrorOf, type DriverError } from './dialect';

const MAX_TEXTS = 4096;
const PREPARABLE = /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/i;

/** Most statements one connection holds prepared (a connection's own bound; the server's is higher). */
export const MAX_PER_CONNECTION = 256;

interface TextState {
  seen: number;
  name: string;
}

const texts = new Map<string, TextState>();
const unpreparable = new Set<string>();
let nextName = 0;

/** The text's prepared name once it recurs, else null (and it is counted). */
export function preparedNameFor(sql: string): string | null {
  if (unpreparable.has(sql) || !PREPARABLE.test(sql)) return null;
  let t = texts.get(sql);
  if (!t) {
    if (texts.size >= MAX_TEXTS) return null;
    t = { seen: 0, name: `tl_${(nextName++).toString(36)}` };
    texts.set(sql, t);
  }
  t.seen++;
  return t.seen >= 2 ? t.name : null;
}

/** The server could not prepare these texts as written: they run inlined from now on, with a warning. */
export function markUnpreparable(sqls: readonly string[], why: string): void {
  for (const sql of sqls) unpreparable.add(sql);
  process.emitWarning(`${sqls.length} statement(s) run unprepared from now on (${why})`, {
    type: 'TaskledgerPreparedStatement',
    detail: sqls.join('\n'),
  });
}

/** The name a text runs under once prepared, without counting a sighting (for tests and diagnostics). */
export function preparedNameOf(sql: string): string | undefined {
  const t = texts.get(sql);
  return t !== undefined && t.seen >= 2 && !unpreparable.has(sql) ? t.name : undefined;
}

/** The text a prepared name runs, the inverse of `preparedNameOf` (for tests and diagnostics). */
export function preparedTextOf(name: string): string | undefined {
  for (const [sql, t] of texts) if (t.name === name) return sql;
  return undefined;
}

/**
 * A batch's `settle(ok, err)`: once it answered, the connection holds the statements it prepared; once it failed,
 * `failed` decides what the connection's record and the error become.
 */
export function settleWith(
  names: Set<string>,
  preparing: readonly { name: string }[],
  failed: (d: DriverError) => void,
): (ok: boolean, err?: unknown) => void {
  return (ok, err) => {
    if (ok) {
      for (const p of preparing) names.add(p.name);
      return;
    }
    failed(driverErrorOf(err));
  };
}
