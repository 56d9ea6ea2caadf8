/**
 * Effect-row locks above the step tier, taken in global order.
 *
 * Contract: a `LockNeed` names one row (tier, table, canonical key) and the
 * `WHERE` clause that selects it. `takeLocks(tx, needs)` sorts the needs the
 * way the LockPlan orders them (tier, then `table:key`), drops duplicates,
 * records each in the plan and runs the locking SELECTs (`FOR UPDATE` or
 * shared) in one round trip, in that order; a need the plan already holds runs no SQL. Locking a row that does
 * not exist takes no lock: the caller's INSERT then meets the primary key, and
 * its transaction restarts on that named unique violation (see
 * `EFFECT_ROW_UNIQUES`). Never begins a transaction.
 *
 * A need that names the columns its caller reads next (`reads`) is taken by a
 * locking read of those columns, whose answer answers the caller's plain read
 * of the same row (`rowRead`, same parameters) with no statement of its own
 * (ADR 0032): one statement instead of a lock and a read.
 *
 * `Reader` abstracts "run one SELECT" over a transaction (`txReader`) or an
 * autocommit connection (`dbReader`), so the same row readers serve a Store
 * transaction, Complete's verification and a worker's read-only observation.
 */
import type { Tier } from '../../db/lock-plan';
import type { Statement } from '../../db/batch';
import { readRows, type Db, type SqlParam, type Tx } from '../../db/tx';

export interface LockNeed {
  tier: Tier;
  table: string;
  /** Canonical primary key (the LockPlan key is `table:key`). */
  key: string;
  /** SQL condition selecting exactly this row, with `?` placeholders. */
  where: string;
  params: SqlParam[];
  mode: 'update' | 'share';
  /**
   * The columns a plain read of exactly this row reads after the lock (`rowRead(table, reads, where)` with the same
   * parameters): the lock reads them, and that read is answered from there (ADR 0032).
   */
  reads?: string;
}

/**
 * Inserts one effect row whose read-back follows (ADR 0051). Where the server answers `INSERT ... RETURNING`
 * (`Tx.insertReturning`: PostgreSQL, MariaDB 10.5+) the insert returns `read.columns` of the row as stored, and that answer
 * stands for the row's plain read (`rowRead(table, columns, where)` with `read.params`) until a write to its table:
 * the read-back is answered with no statement of its own, as a lock's read answers it (ADR 0032). The row is this
 * transaction's (it inserted it, under the locks its caller took), so a read after the insert could only answer
 * the same. MySQL 8 inserts, and the read-back reads, as before. Answers the rows the insert affected.
 */
export async function insertAnswering(
  tx: Tx,
  insert: Statement,
  read: { table: string; columns: string; where: string; params: SqlParam[] },
): Promise<number> {
  if (!tx.insertReturning) return tx.exec(insert.sql, [...insert.params]);
  const [res] = await tx.batchAnswering(
    [{ sql: `${insert.sql} RETURNING ${read.columns}`, params: insert.params }],
    [{ sql: rowRead(read.table, read.columns, read.where), params: read.params }],
  );
  return res?.affected ?? 0;
}

/** The plain read of the row(s) a lock need names, as a need with `reads` answers it (ADR 0032). */
export function rowRead(table: string, columns: string, where: string): string {
  return `SELECT ${columns} FROM ${table} WHERE ${where}`;
}

export type Reader = <T = Record<string, unknown>>(sql: string, params?: SqlParam[]) => Promise<T[]>;

export function txReader(tx: Tx): Reader {
  return <T>(sql: string, params: SqlParam[] = []) => tx.rows<T>(sql, params);
}

/**
 * The statements `fn` issues through its reader before it first waits for an answer, recorded and not sent (the
 * answers never come, so `fn` goes no further): what a kind's apply will read first, for a batch to send early
 * (`Tx.readEarly`, ADR 0026). The very code that reads, so the two cannot drift apart.
 */
export function firstReadsOf(fn: (read: Reader) => Promise<unknown>): Statement[] {
  const seen: Statement[] = [];
  void fn((sql, params = []) => {
    seen.push({ sql, params });
    return new Promise(() => undefined);
  });
  return seen;
}

export function dbReader(db: Db): Reader {
  return <T>(sql: string, params: SqlParam[] = []) => readRows<T>(db, sql, params);
}

function planKey(n: LockNeed): string {
  return `${n.table}:${n.key}`;
}

/** Sorted, de-duplicated copy of `needs`, in the order the LockPlan accepts. */
export function orderLocks(needs: readonly LockNeed[]): LockNeed[] {
  const seen = new Map<string, LockNeed>();
  for (const n of needs) {
    const id = `${n.tier}|${planKey(n)}`;
    const prev = seen.get(id);
    // One row wanted both ways: the exclusive lock covers the shared one.
    const kept = !prev || (prev.mode === 'share' && n.mode === 'update') ? n : prev;
    // What the other need reads next is read by the kept one's lock when that reads nothing (same row, same SQL).
    const other = kept === n ? prev : n;
    const sameRow =
      other !== undefined && other.where === kept.where && JSON.stringify(other.params) === JSON.stringify(kept.params);
    seen.set(
      id,
      kept.reads === undefined && sameRow && other.reads !== undefined ? { ...kept, reads: other.reads } : kept,
    );
  }
  // Each need's key built once, not once per comparison.
  return [...seen.values()]
    .map((n) => ({ n, key: planKey(n) }))
    .sort((a, b) => (a.n.tier !== b.n.tier ? a.n.tier - b.n.tier : a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map((e) => e.n);
}

/** The locking SELECTs run in one round trip, in the order above (the server takes them in list order). */
export async function takeLocks(tx: Tx, needs: readonly LockNeed[]): Promise<void> {
  const statements: Statement[] = [];
  const answering: (Statement | undefined)[] = [];
  for (const n of orderLocks(needs)) {
    if (tx.lockRow(n.tier, n.table, n.key) === 'held') continue;
    const mode = n.mode === 'update' ? 'FOR UPDATE' : tx.forShare;
    const read = n.reads === undefined ? undefined : rowRead(n.table, n.reads, n.where);
    statements.push({
      sql: `${read ?? `SELECT 1 AS locked FROM ${n.table} WHERE ${n.where}`} ${mode}`,
      params: n.params,
    });
    answering.push(read === undefined ? undefined : { sql: read, params: n.params });
  }
  if (statements.length > 0) await tx.batchAnswering(statements, answering);
}

/**
 * Unique constraints an effect INSERT can meet when a concurrent transaction
 * inserted the same key first: the command restarts from tier 1 and re-reads
 * the winner (MySQL names every primary key `PRIMARY`).
 */
export const EFFECT_ROW_UNIQUES = [
  'PRIMARY',
  'pk_workspace_group_members',
  'pk_task_blockers',
  'pk_task_environment_bindings',
  'pk_task_environment_repos',
  'uq_task_environment_repos_environment_repository',
  'pk_task_sessions',
  'pk_task_resource_markers',
] as const;
