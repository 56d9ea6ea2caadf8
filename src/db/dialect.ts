/**
 * Every difference between PostgreSQL and MySQL/MariaDB that business code
 * would otherwise see lives here: placeholders, the database clock, shared
 * row locks, retryable and unique-violation error detection.
 */
import type { Dialect } from './config';

/** SQL is written with `?` placeholders; PostgreSQL gets `$1..$n`. */
export function toDialectSql(dialect: Dialect, sql: string): string {
  if (dialect === 'mysql') return sql;
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/**
 * The database clock, at millisecond precision. PostgreSQL's `now()` is the
 * transaction start, so leases use `clock_timestamp()`; MySQL's `NOW(3)` is
 * the statement start, which is what a lease wants.
 */
export function nowSql(dialect: Dialect): string {
  return dialect === 'postgres' ? "date_trunc('milliseconds', clock_timestamp())" : 'NOW(3)';
}

/** `now + ms` in SQL, with `ms` a bound integer parameter. */
export function nowPlusMsSql(dialect: Dialect): string {
  return dialect === 'postgres'
    ? "date_trunc('milliseconds', clock_timestamp()) + (CAST(? AS integer) * interval '1 millisecond')"
    : 'NOW(3) + INTERVAL (? * 1000) MICROSECOND';
}

export function forShareSql(dialect: Dialect): string {
  return dialect === 'postgres' ? 'FOR SHARE' : 'LOCK IN SHARE MODE';
}

/**
 * MySQL: `FORCE INDEX (index)` for a locking read by a secondary key. On a
 * small table (a new database, stale statistics) the optimizer prefers to
 * scan the primary key over sorting the few rows an `ORDER BY id` asks for,
 * and a locking scan waits on every row it passes — rows of unrelated
 * operations — which is how two of them deadlocked. PostgreSQL locks only the
 * rows it returns: nothing to add.
 */
export function forceIndexSql(dialect: Dialect, index: string): string {
  return dialect === 'postgres' ? '' : `FORCE INDEX (${index})`;
}

export interface DriverError {
  code?: string;
  errno?: number;
  constraint?: string;
  sqlMessage?: string;
  message?: string;
  /** Set by src/db/pg-prepared.ts on an error the next attempt avoids by not using a prepared statement. */
  preparedRestart?: boolean;
}

export function driverErrorOf(err: unknown): DriverError {
  if (err && typeof err === 'object') {
    const e = err as { driverError?: DriverError } & DriverError;
    return e.driverError ?? e;
  }
  return {};
}

/**
 * Thrown inside a transaction to roll it back and run the whole command again from tier 1 (as after a deadlock):
 * the locks it chose were chosen from a hint that its locked reads contradicted (ADR 0020). Nothing it did stays.
 */
export class RestartCommand extends Error {
  override readonly name = 'RestartCommand';
}

/**
 * PG 40001 serialization, 40P01 deadlock, 55P03 lock not available, and an error src/db/pg-prepared.ts marked
 * `preparedRestart` (a prepared statement that was missing, already there, or could not be prepared: the next
 * attempt runs without it); MySQL 1213 deadlock, 1205 lock wait timeout, 3572 NOWAIT.
 */
export function isRetryableError(err: unknown): boolean {
  if (err instanceof RestartCommand) return true;
  const d = driverErrorOf(err);
  if (d.code === '40001' || d.code === '40P01' || d.code === '55P03') return true;
  if (d.preparedRestart === true) return true;
  return d.errno === 1213 || d.errno === 1205 || d.errno === 3572;
}

/** A unique violation means "re-read by key", never "retry blindly". */
export function uniqueViolationConstraint(err: unknown): string | null {
  const d = driverErrorOf(err);
  if (d.code === '23505') return d.constraint ?? '';
  if (d.errno === 1062) {
    const m = /for key '(?:[^.']*\.)?([^']+)'/.exec(d.sqlMessage ?? d.message ?? '');
    return m?.[1] ?? '';
  }
  return null;
}

export function isCheckViolation(err: unknown): boolean {
  const d = driverErrorOf(err);
  return d.code === '23514' || d.errno === 4025 || d.errno === 3819;
}
