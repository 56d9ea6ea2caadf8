/**
 * One SQL statement with its bound values, and how a value becomes a
 * PostgreSQL literal when a statement runs unprepared in a batch, and how a
 * batch is rendered as text (src/db/batch.ts, src/db/pg-prepared.ts).
 *
 * Contract: `inlinePgParams(sql, params)` replaces each `?` with its value:
 * strings as the driver's `escapeLiteral` writes them (`pgStringLiteral`,
 * the same text), finite numbers, bigints, booleans and null; anything else
 * throws (`inlinable` says beforehand). `pgLiteralList(params)` is the
 * parenthesized, comma-separated list of the same literals (an `EXECUTE`'s
 * arguments).
 */

/** A bound value (`?` placeholder); re-exported by batch.ts and tx.ts, where callers import it. */
export type SqlParam = string | number | bigint | boolean | null | Date | Buffer;

export interface Statement {
  sql: string;
  params: readonly SqlParam[];
}

/**
 * `pg.escapeLiteral(value)`, character for character: the string between single quotes with each quote doubled,
 * and where it holds a backslash, each backslash doubled and the literal written ` E'...'`. The driver builds its
 * answer one character at a time (46 µs for a 3.4 KB plan document on the bench VM, 0.4-0.65 µs for a UUID); two
 * native replaces build the same text in 3-5 µs and 0.04-0.09 µs. Every string a PostgreSQL batch sends, documents
 * included, goes through here. test/db/statement.test.ts compares the two over random and adversarial strings.
 */
export function pgStringLiteral(value: string): string {
  const quoted = value.includes("'") ? value.replace(/'/g, "''") : value;
  return quoted.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

function pgLiteral(value: SqlParam): string {
  if (value === null) return 'NULL';
  if (typeof value === 'string') return pgStringLiteral(value);
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

/** `(literal, literal, ...)`: the parameters as PostgreSQL literals, in order; '' for none. */
export function pgLiteralList(params: readonly SqlParam[]): string {
  if (params.length === 0) return '';
  let out = '(';
  for (let i = 0; i < params.length; i++) out += (i === 0 ? '' : ', ') + pgLiteral(params[i] as SqlParam);
  return `${out})`;
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
