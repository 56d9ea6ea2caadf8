/**
 * Plain reads a transaction sent before it needed their answers
 * (`Tx.readEarly`, docs/adr/0026-ledger-batch-reads-early.md), kept until the
 * same statement is issued again.
 *
 * Contract: `keep(sql, key, answer)` keeps the answer of a plain read sent
 * now (`fromLock`: the answer of a locking read of the same row, which
 * `answeredByLock(key)` reports, ADR 0032); `take(key)` returns a kept answer once and forgets it (undefined when
 * there is none, or it was dropped; a statement kept twice answers twice, in
 * order) — a locking read's answer it returns every time until it is
 * dropped, as the row is this transaction's; `issued(sql)` is called for every
 * statement the transaction issues after that: any statement that is not a
 * SELECT may write, and drops the kept reads of every table it names as
 * written (`INSERT INTO`, `UPDATE`, `DELETE FROM`), or all of them when it
 * names none. A SELECT, locking or not, writes nothing and drops nothing.
 * Over-dropping only costs the round trip the early read saved; keeping an
 * answer a write changed would be wrong, so the parse errs on dropping.
 *
 * Why a kept answer may stand for the statement issued again: for rows the
 * transaction already holds locked, nobody else can change them, and every
 * write of the transaction itself goes through `issued`; for rows it does
 * not lock, a read under READ COMMITTED may be outdated by COMMIT wherever
 * in the transaction it runs, so running it a round trip earlier (after the
 * same locks) gives nothing weaker.
 */
import type { StatementResult } from './batch';

/** Tables a read may look at: every name after FROM or JOIN (subqueries included). */
const READ_TABLES = /\b(?:FROM|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)/gi;
/** Tables a statement may write. */
const WRITE_TABLES = /\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+([A-Za-z_][A-Za-z0-9_]*)/gi;
/** A plain read: a SELECT without a locking clause. */
const PLAIN_READ = /^\s*SELECT\b(?![\s\S]*\b(?:FOR\s+(?:UPDATE|SHARE)|LOCK\s+IN\s+SHARE\s+MODE)\b)/i;

function namesIn(sql: string, pattern: RegExp): ReadonlySet<string> {
  return new Set([...sql.matchAll(pattern)].map((m) => (m[1] as string).toLowerCase()));
}

/** What the parse below learns of one statement text: the same for every statement with that text. */
interface SqlShape {
  plainRead: boolean;
  select: boolean;
  reads: ReadonlySet<string>;
  writes: ReadonlySet<string>;
}

/**
 * Shapes by statement text. The ledger's texts are a few hundred constants (values travel as parameters), parsed
 * once per process instead of per statement; a text built with values in it is parsed each time beyond the bound.
 */
const shapes = new Map<string, SqlShape>();
const MAX_SHAPES = 4096;

function shapeOf(sql: string): SqlShape {
  const known = shapes.get(sql);
  if (known !== undefined) return known;
  const shape: SqlShape = {
    plainRead: PLAIN_READ.test(sql) && !/pg_advisory/i.test(sql),
    select: /^\s*SELECT\b/i.test(sql),
    reads: namesIn(sql, READ_TABLES),
    writes: namesIn(sql, WRITE_TABLES),
  };
  if (shapes.size < MAX_SHAPES) shapes.set(sql, shape);
  return shape;
}

export function isPlainRead(sql: string): boolean {
  return shapeOf(sql).plainRead;
}

interface Kept {
  answer: Promise<StatementResult>;
  tables: ReadonlySet<string>;
  /** The answer of a locking read of the same row (Tx.batchAnswering, ADR 0032). */
  fromLock?: boolean;
}

/** Drops every entry of `kept` that reads a table the statement `sql` may write (all of them when it names none). */
function dropWritten<V>(kept: Map<string, V>, sql: string, tablesOf: (v: V) => ReadonlySet<string>[]): void {
  if (kept.size === 0) return;
  const shape = shapeOf(sql);
  if (shape.select) return;
  const written = shape.writes;
  for (const [key, v] of kept) {
    if (written.size === 0 || tablesOf(v).some((tables) => [...tables].some((t) => written.has(t)))) kept.delete(key);
  }
}

export class EarlyReads {
  private readonly kept = new Map<string, Kept[]>();

  keep(sql: string, key: string, answer: Promise<StatementResult>, fromLock = false): void {
    if (!isPlainRead(sql)) throw new Error(`internal: only a plain read may be read early ("${sql.slice(0, 80)}")`);
    // Handled: a failed round trip fails the transaction, and nobody may ever ask for this answer.
    answer.catch(() => undefined);
    const queue = this.kept.get(key) ?? [];
    queue.push({ answer, tables: shapeOf(sql).reads, fromLock });
    this.kept.set(key, queue);
  }

  /** An answer a lock read (`fromLock`, ADR 0032) is kept for this statement. */
  answeredByLock(key: string): boolean {
    return this.kept.get(key)?.some((k) => k.fromLock) === true;
  }

  take(key: string): Promise<StatementResult> | undefined {
    const queue = this.kept.get(key);
    // A locking read's answer answers every read of its row until a write drops it (the row is this transaction's).
    if (queue?.[0]?.fromLock === true) return queue[0].answer;
    const k = queue?.shift();
    if (queue?.length === 0) this.kept.delete(key);
    return k?.answer;
  }

  issued(sql: string): void {
    dropWritten(this.kept, sql, (queue) => queue.map((k) => k.tables));
  }

  /** Nothing kept: a statement issued need not be looked up (nor its key computed). */
  get empty(): boolean {
    return this.kept.size === 0;
  }

  /** Answers kept and not yet asked for. */
  get size(): number {
    let n = 0;
    for (const queue of this.kept.values()) n += queue.length;
    return n;
  }
}

/**
 * The latest answer of every plain read a transaction sent while it keeps them (`Tx.keepAnswers`), for a later
 * step of the same transaction that asks the very same statement again (`Tx.answerFromKept`): Complete's phase A
 * in the ledger batch re-reads the effect rows the batch has just written and read back (ADR 0030). Dropped by
 * writes exactly as `EarlyReads` are; unlike them, an answer may be asked for any number of times, and a read
 * sent again replaces it.
 */
export class KeptAnswers {
  private readonly latest = new Map<string, Kept>();

  keep(sql: string, key: string, answer: Promise<StatementResult>): void {
    if (!isPlainRead(sql)) return;
    answer.catch(() => undefined);
    this.latest.set(key, { answer, tables: shapeOf(sql).reads });
  }

  get(key: string): Promise<StatementResult> | undefined {
    return this.latest.get(key)?.answer;
  }

  issued(sql: string): void {
    dropWritten(this.latest, sql, (k) => [k.tables]);
  }
}
