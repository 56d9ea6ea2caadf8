/**
 * One SQL statement with its bound values, and how a value becomes a
 * PostgreSQL literal when a statement travels in the simple protocol
 * (src/db/batch.ts, src/db/pg-prepared.ts).
 *
 * Contract: `inlinePgParams(sql, params)` replaces each `?` with its value:
 * strings through the driver's `escapeLiteral`, finite numbers, bigints,
 * booleans and null; anything else throws (`inlinable` says beforehand).
 */
import pg from 'pg';

/** A bound value (`?` placeholder); re-exported by batch.ts and tx.ts, where callers import it. */
export type SqlParam = string | number | bigint | boolean | null | Date | Buffer;

export interface Statement {
  sql: string;
  params: readonly SqlParam[];
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
