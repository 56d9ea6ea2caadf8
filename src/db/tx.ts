/**
 * The transaction runner: the only place that begins, commits, rolls back and
 * retries.
 *
 * `runTransaction(db, name, fn)` opens one READ COMMITTED transaction (the
 * session default of every connection) with a
 * fresh LockPlan, runs `fn(tx)`, and commits. A deadlock, serialization or
 * lock-wait failure rolls back and restarts the whole command from tier 1
 * (nothing read in the failed attempt is reused), with capped exponential
 * backoff plus jitter. A lost connection (src/db/connection-loss.ts) before
 * COMMIT was sent means the server rolled the transaction back: the command
 * restarts on a new connection, with its own longer backoff, and after
 * LOST_ATTEMPTS throws `database_unavailable`. A connection lost while COMMIT
 * was on the wire throws `commit_outcome_unknown` (never retried here: the
 * caller asks the ledger again). Any other error rolls back and propagates. `fn` must do
 * no I/O other than SQL on `tx`: Git, HTTP and process work happen outside.
 * START TRANSACTION travels with the first statements, and statements issued
 * together share a round trip in issue order (`Tx.batch`, `Tx.batchAhead`,
 * docs/adr/0006-statement-batches.md); a compare-and-set sent without
 * waiting (`Tx.expect`) is checked before COMMIT; COMMIT on PostgreSQL proves
 * it committed.
 */
import type { DataSource, QueryRunner } from 'typeorm';
import { isTaskLedgerError, TaskLedgerError } from '../domain/errors';
import type { Dialect } from './config';
import { countConnectionLoss, isConnectionLost } from './connection-loss';
import {
  driverErrorOf,
  forShareSql,
  isRetryableError,
  nowPlusMsSql,
  nowSql,
  RestartCommand,
  toDialectSql,
  uniqueViolationConstraint,
} from './dialect';
import { LockPlan, TIER, type Tier } from './lock-plan';
import { inlinable, sendBatch, type SqlParam, type Statement, type StatementResult } from './batch';
import { checkedFailure, checkedStatements } from './checked-commit';
import { EarlyReads, isPlainRead, KeptAnswers } from './early-reads';
import { Expectations, type Tracked } from './expectations';
import { Coalescer, type Queued } from './coalesce';
import { answersInsertReturning } from './mysql-prepared';

export interface Db {
  readonly ds: DataSource;
  readonly dialect: Dialect;
}

/** Why these numbers: contention on one workspace resolves within a few
 *  milliseconds; 10 attempts with a 5 ms base and 250 ms cap give up after
 *  roughly a second of sustained deadlocks, which signals a bug, not load. */
const MAX_ATTEMPTS = 10;
const BACKOFF_BASE_MS = 5;
const BACKOFF_CAP_MS = 250;
/** Why 8 attempts from 25 ms to a 1 s cap: about three seconds of a database that keeps dropping connections
 *  (a restart, a failover, a connection killer) before the caller hears `database_unavailable`. */
const LOST_ATTEMPTS = 8;
const LOST_BACKOFF_BASE_MS = 25;
const LOST_BACKOFF_CAP_MS = 1000;

export type { SqlParam, Statement };

/** A statement that takes a row lock or writes: it must not run while a prefetched lock is pending. */
const LOCKING_SQL = /\bFOR\s+(UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b|pg_advisory|^\s*(INSERT|UPDATE|DELETE)\b/i;

/**
 * Why 32 microtask turns: statements issued together (`Promise.all`) are
 * queued within a few turns of each other (each resolved `await` on the way
 * to a read costs one), and a step of a ledger batch whose reads were sent
 * early (`readEarly`, ADR 0026) reaches its writes through a few dozen turns
 * of resolved awaits after the previous step's: with 8 they missed the round
 * trip. Turns cost microseconds; waiting for the next macrotask instead would
 * hold every round trip behind whatever else the event loop has ready.
 */
const FLUSH_TURNS = 32;

function statementKey(sql: string, params: readonly SqlParam[]): string {
  // Without a replacer JSON.stringify takes its fast path; only a bigint needs one.
  const json = params.some((v) => typeof v === 'bigint')
    ? JSON.stringify(params, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))
    : JSON.stringify(params);
  return `${sql}\u0000${json}`;
}

/** A statement waiting for the next flush; `check` marks a write sent without waiting (`Tx.expect`). */
interface Pending {
  stmt: Statement;
  resolve: (r: StatementResult) => void;
  reject: (e: unknown) => void;
  check?: Tracked;
}

export class Tx {
  readonly locks = new LockPlan();
  private rollbackRequested = false;
  /** START TRANSACTION has been sent; it travels with the transaction's first statement(s). */
  private begun = false;
  /** Results of statements sent ahead (`batchAhead`), in the order the caller will ask for them; `guess`: guessed. */
  private readonly prefetched: Array<{ key: string; result: StatementResult; guess?: boolean }> = [];
  /** A capturing transaction (`statementsIssued`): its first round trip is recorded here, never sent. */
  private captured: Statement[] | null = null;
  /** Statements issued since the last flush, sent together on the event loop's next turn. */
  private readonly pending: Pending[] = [];
  private flushScheduled = false;
  /** The round trip on the wire; the next flush follows it. */
  private inflight: Promise<void> = Promise.resolve();
  private closed = false;
  /** The last writes, sent with COMMIT (`commitWith`). */
  private finals: Statement[] | null = null;
  private finalsAnswer: { resolve: (r: StatementResult[]) => void; reject: (e: unknown) => void } | null = null;
  /** Writes sent without waiting for their answer (`expect`), settled before COMMIT. */
  readonly expectations = new Expectations();
  /** Verifications registered with `checkLater`. */
  private laterChecks = 0;
  /** Plain reads sent before they were asked for (`readEarly`), answered from here when they are. */
  private readonly early = new EarlyReads();
  /** The latest answer of every plain read, once `keepAnswers` was called; asked only inside `answerFromKept`. */
  private answers: KeptAnswers | null = null;
  private answering = false;

  constructor(
    private readonly qr: QueryRunner,
    readonly dialect: Dialect,
    /**
     * The server answers `INSERT ... RETURNING` (PostgreSQL; MariaDB 10.5 and later, told by its handshake:
     * `answersInsertReturning`): an insert can return the row as stored, which then answers the row's read-back
     * (`insertAnswering`, ADR 0051). False for MySQL 8.
     */
    readonly insertReturning = dialect === 'postgres',
  ) {}

  /**
   * The transaction's last writes, sent with its COMMIT in one round trip
   * (`runTransaction`), in this order. Only for writes whose outcome nothing
   * inspects: locks this transaction already holds must guarantee them (a
   * compare-and-set whose count decides anything is sent with `exec`). A
   * failing one rolls the whole transaction back and its error propagates as
   * from `exec`; a connection lost on the way answers
   * `commit_outcome_unknown`. Nothing may be issued after it. A read may
   * close the list (the view of rows just written): the returned promise
   * gives every statement's result once the transaction committed, and is
   * rejected (handled) when it did not. A body that hands it out must wrap
   * it (`{ results }`): an async body returning the promise itself would
   * wait for the COMMIT that only follows the body.
   */
  commitWith(statements: readonly Statement[]): Promise<StatementResult[]> {
    if (this.finals !== null) throw new Error('internal: commitWith called twice');
    this.finals = [...statements];
    const results = new Promise<StatementResult[]>((resolve, reject) => {
      this.finalsAnswer = { resolve, reject };
    });
    results.catch(() => undefined);
    return results;
  }

  /** Answers `commitWith`'s promise: its statements' results once committed, or why not. */
  settleFinals(results: StatementResult[] | Error): void {
    if (results instanceof Error) this.finalsAnswer?.reject(results);
    else this.finalsAnswer?.resolve(results);
    this.finalsAnswer = null;
  }

  /** The writes `commitWith` left for COMMIT. */
  get finalWrites(): readonly Statement[] {
    return this.finals ?? [];
  }

  /** Whether the transaction has been opened on the server (a transaction that ran no SQL never is). */
  get opened(): boolean {
    return this.begun;
  }

  /** Rows of a SELECT (or RETURNING). SQL uses `?` placeholders. */
  async rows<T = Record<string, unknown>>(sql: string, params: SqlParam[] = []): Promise<T[]> {
    const [res] = await this.batch([{ sql, params }]);
    return (res?.rows ?? []) as T[];
  }

  async one<T = Record<string, unknown>>(sql: string, params: SqlParam[] = []): Promise<T | undefined> {
    const rows = await this.rows<T>(sql, params);
    return rows[0];
  }

  /**
   * Issues a write that must change exactly `affected` rows, without waiting
   * for its answer: it travels with the next statements the transaction
   * issues (or alone, before COMMIT). `runTransaction` settles every
   * expectation before it commits; a wrong count throws `mismatch()` and
   * rolls the whole transaction back, and is what the caller sees even when
   * a later statement failed first. Only for a compare-and-set on rows this
   * transaction already holds, whose outcome nothing before COMMIT reads
   * (what follows assumes it took; if it did not, none of it commits) — or
   * for a fence: a SELECT, locking or not, that must answer `affected` rows
   * (ADR 0028), on the same terms.
   */
  expect(statement: Statement, affected: number, mismatch: () => Error): void {
    if (this.closed || this.finals !== null) throw new Error('internal: statement on a finished transaction');
    this.early.issued(statement.sql);
    this.answers?.issued(statement.sql);
    let item!: Pending;
    const result = new Promise<StatementResult>((resolve, reject) => {
      item = { stmt: statement, resolve, reject };
    });
    // A SELECT (a fence, ADR 0028) counts the rows it answered (src/db/batch.ts).
    item.check = this.expectations.track(result, affected, mismatch);
    this.pending.push(item);
    this.scheduleFlush();
  }

  /**
   * Registers a verification the transaction does not wait for here: typically
   * the read-back of rows just inserted, issued with the inserts so the
   * statements after it (the record, the next step's claim and reads) travel in
   * the same round trip instead of waiting for it. `runTransaction` settles it
   * before COMMIT with the expectations; a rejection rolls the whole
   * transaction back and is what the caller sees. Only for a check whose
   * outcome nothing before COMMIT reads: what follows assumes it passed, and
   * none of it commits when it did not.
   */
  checkLater(check: Promise<unknown>): void {
    if (this.closed || this.finals !== null) throw new Error('internal: check on a finished transaction');
    this.laterChecks++;
    this.expectations.trackCheck(check);
  }

  /**
   * The statements still waiting to be sent when the body ended, for the runner to send with COMMIT instead
   * (expected writes and fences made to fail on a wrong count, src/db/checked-commit.ts): the expected ones when
   * nothing else waits; every one when the body left final writes (`commitWith`) and nothing was sent ahead to
   * answer them (ADR 0028: a body that issues its fences, locks and writes without awaiting any commits in one
   * round trip). Nothing can read their answers before COMMIT: the body has returned.
   */
  takeUnsent(): Pending[] {
    if (this.pending.length === 0) return [];
    const onlyChecks = this.pending.every((p) => p.check !== undefined);
    // A verification (`checkLater`) may wait on a plain statement's answer: settled before COMMIT, it would wait
    // for ever on one sent with it.
    if (!onlyChecks && (this.finals === null || this.prefetched.length > 0 || this.laterChecks > 0)) return [];
    return this.pending.splice(0);
  }

  /** Runs an INSERT/UPDATE/DELETE and returns the affected row count. */
  async exec(sql: string, params: SqlParam[] = []): Promise<number> {
    const [res] = await this.batch([{ sql, params }]);
    return res?.affected ?? 0;
  }

  /**
   * Runs the statements in order and returns their results. Statements that
   * callers issue together (the reads of `Promise.all`, or one `batch` call)
   * are queued for a few microtask turns (FLUSH_TURNS) and then travel in one round
   * trip (`runNow`), in the order they were issued; a caller awaiting one
   * statement at a time gets one round trip per statement, as before.
   */
  batch(statements: readonly Statement[]): Promise<StatementResult[]> {
    if (this.closed) return Promise.reject(new Error('internal: statement on a finished transaction'));
    if (this.finals !== null) return Promise.reject(new Error('internal: statement after commitWith'));
    const waiting = this.pending.length;
    const results = statements.map((stmt) => {
      this.early.issued(stmt.sql);
      const answers = this.answers;
      answers?.issued(stmt.sql);
      // Only plain reads are ever kept (early or as answers): anything else needs no key (building it costs).
      if ((this.early.empty && answers === null) || !isPlainRead(stmt.sql)) return this.queue(stmt);
      const key = statementKey(stmt.sql, stmt.params);
      const kept = this.early.empty ? undefined : this.early.take(key);
      if (kept !== undefined) {
        answers?.keep(stmt.sql, key, kept);
        return kept;
      }
      const known = this.answering ? answers?.get(key) : undefined;
      if (known !== undefined) return known;
      const answer = this.queue(stmt);
      answers?.keep(stmt.sql, key, answer);
      return answer;
    });
    if (this.pending.length > waiting) this.scheduleFlush();
    return Promise.all(results);
  }

  /**
   * `batch`, where the answer of statement i also answers the plain read `answering[i]` — each time this
   * transaction issues it later (same SQL and parameters) — until a write to a table it reads drops it, as an early
   * read is (`readEarly`). For a locking read of a row whose plain read follows (src/store/effects/row-locks.ts, ADR
   * 0032): the row is locked from that statement on, so a read after it could only answer the same.
   */
  batchAnswering(
    statements: readonly Statement[],
    answering: readonly (Statement | undefined)[],
  ): Promise<StatementResult[]> {
    return this.answered(this.batch(statements), answering);
  }

  /** Keeps answer i of `all` for the plain read `answering[i]`, as a locking read's (`batchAnswering`). */
  private answered(
    all: Promise<StatementResult[]>,
    answering: readonly (Statement | undefined)[],
  ): Promise<StatementResult[]> {
    for (const read of answering) {
      if (read !== undefined && !isPlainRead(read.sql)) throw new Error(`internal: not a plain read ("${read.sql}")`);
    }
    answering.forEach((read, i) => {
      if (read === undefined) return;
      this.early.keep(
        read.sql,
        statementKey(read.sql, read.params),
        all.then((r) => r[i] as StatementResult),
        true,
      );
    });
    return all;
  }

  private queue(stmt: Statement): Promise<StatementResult> {
    return new Promise<StatementResult>((resolve, reject) => this.pending.push({ stmt, resolve, reject }));
  }

  /**
   * From now on keeps the latest answer of every plain read this transaction sends (or takes from `readEarly`),
   * dropped by its writes as early reads are (src/db/early-reads.ts), for `answerFromKept` (ADR 0030).
   */
  keepAnswers(): void {
    this.answers ??= new KeptAnswers();
  }

  /**
   * Runs `fn` with every plain read it issues answered from the kept answers when the very same statement (same
   * SQL, same parameters) was answered earlier in this transaction and no write of it since named a table it reads:
   * for a verification that re-reads rows this transaction holds locked, which only its own writes could change.
   * The rest go to the server as usual. Nothing else may issue statements on this transaction meanwhile.
   */
  async answerFromKept<T>(fn: () => Promise<T>): Promise<T> {
    if (this.answers === null) return fn();
    this.answering = true;
    try {
      return await fn();
    } finally {
      this.answering = false;
    }
  }

  /**
   * Sends plain reads with the next round trip, before anything asks for them, and keeps their answers: the same
   * statements (same SQL and parameters) issued later in this transaction are answered from there, with no round
   * trip of their own, unless a write issued in between named a table they read (src/db/early-reads.ts). For reads
   * issued after the locks they read under (ADR 0026): locked rows change only by this transaction's own writes,
   * and a read of unlocked rows could be outdated by COMMIT wherever it ran.
   */
  readEarly(statements: readonly Statement[]): void {
    if (this.closed || this.finals !== null) throw new Error('internal: statement on a finished transaction');
    let sent = 0;
    for (const stmt of statements) {
      const key = statementKey(stmt.sql, stmt.params);
      // Already answered by a lock that read it (ADR 0032): sending it again would only keep a second copy.
      if (this.early.answeredByLock(key)) continue;
      const answer = new Promise<StatementResult>((resolve, reject) => this.pending.push({ stmt, resolve, reject }));
      this.early.keep(stmt.sql, key, answer);
      sent++;
    }
    if (sent > 0) this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      this.flushAfter(FLUSH_TURNS);
    }
  }

  /** Flushes after `turns` more microtask turns, so statements that callers issue after a resolved `await` still join. */
  private flushAfter(turns: number): void {
    queueMicrotask(() => (turns > 0 ? this.flushAfter(turns - 1) : this.flush()));
  }

  private flush(): void {
    this.flushScheduled = false;
    const items = this.pending.splice(0);
    if (items.length === 0) return;
    this.inflight = this.inflight.then(async () => {
      try {
        if (this.closed) throw new Error('internal: statement on a finished transaction');
        const results = await this.runNow(items.map((i) => i.stmt));
        items.forEach((item, k) => item.resolve(results[k] as StatementResult));
      } catch (err) {
        for (const item of items) item.reject(err);
      }
    });
  }

  /**
   * Refuses statements from now on and waits for the ones on the wire: the
   * runner calls it before COMMIT or ROLLBACK, so a statement still in flight
   * from an abandoned branch can never reach the connection after it is
   * returned to the pool.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const item of this.pending.splice(0)) item.reject(new Error('internal: statement on a finished transaction'));
    await this.inflight;
  }

  /**
   * Runs the statements in order, in as few round trips as the driver
   * allows: one (with the transaction's START TRANSACTION when it is the
   * first), unless PostgreSQL must bind a parameter it cannot inline
   * (src/db/batch.ts). Statements sent ahead by `batchAhead` are answered
   * from there, in order.
   */
  private async runNow(statements: readonly Statement[]): Promise<StatementResult[]> {
    const results: StatementResult[] = [];
    const keyOf = (k: number) => statementKey((statements[k] as Statement).sql, (statements[k] as Statement).params);
    let i = 0;
    while (i < statements.length && this.prefetched.length > 0) {
      const head = this.prefetched[0] as { key: string; result: StatementResult; guess?: boolean };
      if (head.key === keyOf(i)) {
        this.prefetched.shift();
        results.push(head.result);
        i++;
        continue;
      }
      if (head.guess) {
        // A guess missed: what it locked may now sort after what is asked. Start over, guessing nothing.
        this.prefetched.splice(0);
        throw new RestartCommand(`a statement guessed ahead was not the one issued ("${keyOf(i).slice(0, 80)}")`);
      }
      // Plain reads may run before the statements sent ahead; they go together, up to the next one sent ahead.
      let j = i;
      while (j < statements.length && keyOf(j) !== head.key) {
        const sql = (statements[j] as Statement).sql;
        if (LOCKING_SQL.test(sql)) {
          // A lock sent ahead was taken before this one: that would be out of tier order.
          throw new Error(
            `internal: "${sql.slice(0, 80)}" runs before the lock sent ahead ("${head.key.slice(0, 80)}")`,
          );
        }
        j++;
      }
      results.push(...(await this.send(statements.slice(i, j))));
      i = j;
    }
    if (i < statements.length) results.push(...(await this.send(statements.slice(i))));
    return results;
  }

  /**
   * Sends `now` and `ahead` in one round trip and returns the results of
   * `now`. The results of `ahead` answer the caller's next identical
   * statements (same SQL, same parameters), in order; a locking statement or
   * a write that is not the next one sent ahead throws, since its lock would
   * follow locks taken ahead of it. Only for statements that nothing in
   * between can change: the rows they lock stay locked until commit.
   */
  async batchAhead(
    now: readonly Statement[],
    ahead: readonly Statement[],
    /**
     * Statements guessed to follow `ahead` (ADR 0021), answered the same way; the first statement issued in their
     * place that is not the next guess throws `RestartCommand` (the runner starts the command over), since what
     * the guesses locked might then sort after what is asked.
     */
    guessed: readonly Statement[] = [],
    /** As `batchAnswering`'s, for the statements of `now`: the plain read each locking one answers later. */
    answering: readonly (Statement | undefined)[] = [],
  ): Promise<StatementResult[]> {
    const results = await this.answered(this.batch([...now, ...ahead, ...guessed]), answering);
    [...ahead, ...guessed].forEach((s, k) => {
      this.prefetched.push({
        key: statementKey(s.sql, s.params),
        result: results[now.length + k] as StatementResult,
        guess: k >= ahead.length,
      });
    });
    return results.slice(0, now.length);
  }

  private async send(statements: readonly Statement[]): Promise<StatementResult[]> {
    if (this.captured !== null) {
      // A capturing transaction: the first round trip is what was wanted; nothing is sent, nothing else runs.
      this.captured.push(...statements);
      this.closed = true;
      throw new CapturedStatements();
    }
    const begin = !this.begun;
    this.begun = true;
    if (this.dialect === 'postgres' && !statements.every((s) => inlinable(s.params))) {
      if (begin) await this.qr.query('START TRANSACTION');
      const out: StatementResult[] = [];
      for (const s of statements) out.push(await queryOne(this.qr, this.dialect, s));
      return out;
    }
    // One statement goes as a batch of one too: on PostgreSQL so that a statement that recurs runs prepared
    // (src/db/pg-prepared.ts); on MySQL as it is, as a parameterized query went before (ADR 0045).
    const alone = !begin && statements.length === 1 && this.dialect === 'mysql';
    return sendBatch(this.qr, this.dialect, statements, { begin, prepare: !alone });
  }

  /** The database clock (ms precision). */
  get now(): string {
    return nowSql(this.dialect);
  }

  /** `now + ?ms`; bind the milliseconds as the next parameter. */
  get nowPlusMs(): string {
    return nowPlusMsSql(this.dialect);
  }

  get forShare(): string {
    return forShareSql(this.dialect);
  }

  /**
   * Takes a transaction-scoped exclusive lock on an identity key (a 32-byte
   * digest), in tier order. PostgreSQL: `pg_advisory_xact_lock` on the first
   * eight digest bytes. MySQL: the `lock_keys` row of the full digest,
   * inserted or, when present, locked by its duplicate-key update, in one
   * statement (docs/adr/0001-lock-keys.md, 0023). Either is released only by
   * commit or rollback.
   */
  async lockKey(tier: Tier, digest: Buffer, planKey?: string): Promise<void> {
    const hex = digest.toString('hex');
    // `planKey` lets a key lock sort with the rows of its tier (e.g. a new
    // task's key among existing task rows, all in UUID order).
    if (this.locks.acquire(tier, planKey ?? `key:${hex}`) === 'held') return;
    if (this.dialect === 'postgres') {
      await this.rows('SELECT pg_advisory_xact_lock(?::bigint) AS locked', [digest.readBigInt64BE(0).toString()]);
      return;
    }
    // One statement, like PostgreSQL's (ADR 0023): a new key's row is inserted and exclusively locked; an existing
    // one is exclusively locked by the duplicate-key update (InnoDB takes an X lock, not S, on the duplicate); a
    // concurrent first insert of the same key is waited for, then found. (A deadlock here restarts the command.)
    await this.exec(
      `INSERT INTO lock_keys (key_hash, created_at) VALUES (?, ${this.now}) ON DUPLICATE KEY UPDATE key_hash = key_hash`,
      [hex],
    );
  }

  /**
   * Ends this transaction with a rollback instead of a commit while still
   * returning the command's value (e.g. Begin found the external ID after
   * inserting its operation row: the found outcome must write nothing).
   */
  rollbackOnly(): void {
    this.rollbackRequested = true;
  }

  get isRollbackOnly(): boolean {
    return this.rollbackRequested;
  }

  /** Whether every row lock named could still be taken, in the order given, without breaking the tier order. */
  canLockRows(rows: readonly { tier: Tier; table: string; key: string }[]): boolean {
    // Sorted, the first row not yet held decides: the later ones sort after it.
    return rows.every((r) => this.locks.accepts(r.tier, `${r.table}:${r.key}`));
  }

  /** Whether every row lock named is already held by this transaction. */
  holdsRows(rows: readonly { tier: Tier; table: string; key: string }[]): boolean {
    return rows.every((r) => this.locks.holds(r.tier, `${r.table}:${r.key}`));
  }

  /** Records a row lock in the plan; the caller's SQL takes it (`FOR UPDATE` / `FOR SHARE`). */
  lockRow(tier: Tier, table: string, key: string): 'new' | 'held' {
    return this.locks.acquire(tier, `${table}:${key}`);
  }

  /**
   * Records the lock of an operation row of any kind (creation operation,
   * external-ID release, workspace deletion): they share tier 4 and sort by
   * UUID alone, whatever their table (companion notes §1), so a transaction
   * that holds two of them (a release and its holder's creation) must take
   * them in ascending id order or the plan throws.
   */
  lockOperationRow(table: string, id: string): 'new' | 'held' {
    return this.locks.acquire(TIER.OPERATION, `${id}:${table}`);
  }
}

export interface TransactionOptions {
  /** Called before each retry (for metrics and tests). */
  onRetry?: (attempt: number, err: unknown) => void;
  /**
   * Named unique constraints whose violation restarts the command (the re-run
   * re-reads by key and finds the winner). Any other violation propagates.
   */
  restartOnUnique?: readonly string[];
  /**
   * A connection lost while committing restarts the command like one lost before, instead of answering
   * `commit_outcome_unknown`: for a command whose next attempt finds out by itself whether the lost one
   * committed (Begin's one-round-trip attempt, ADR 0028: it looks for its own operation row).
   */
  retryLostCommit?: boolean;
}

/** Ends a capturing transaction's first round trip (`statementsIssued`). */
class CapturedStatements extends Error {
  override readonly name = 'CapturedStatements';
}

/**
 * The statements `fn` would send in its first round trip on a fresh transaction of this dialect, recorded and not
 * sent: nothing reaches a database, and `fn` itself ends there (its rejection is swallowed). For a caller that
 * guesses what a transaction will issue next (`batchAhead`'s `guessed`), from the very code that will issue it.
 */
export async function statementsIssued(dialect: Dialect, fn: (tx: Tx) => Promise<unknown>): Promise<Statement[]> {
  const tx = new Tx(undefined as unknown as QueryRunner, dialect);
  const captured: Statement[] = [];
  (tx as unknown as { captured: Statement[] }).captured = captured;
  await Promise.allSettled([fn(tx)]);
  return captured;
}

/** MySQL connections that already run their session in UTC. */
const utcSessions = new WeakSet<object>();

/**
 * MySQL's NOW(3) and DATETIME defaults follow the session time zone; every
 * connection is switched to UTC once, so stored times read back correctly
 * through the driver's `timezone: 'Z'`, and to READ COMMITTED as its session
 * default, so a transaction needs no per-transaction `SET TRANSACTION` (one
 * statement less in each of a creation's dozen transactions). PostgreSQL gets
 * both from its connection options (src/db/data-source.ts).
 */
export async function ensureSession(qr: QueryRunner, dialect: Dialect): Promise<void> {
  if (dialect !== 'mysql') return;
  const conn = (qr as unknown as { databaseConnection?: object }).databaseConnection;
  if (!conn || utcSessions.has(conn)) return;
  await sendBatch(
    qr,
    dialect,
    [
      { sql: "SET time_zone = '+00:00'", params: [] },
      { sql: 'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED', params: [] },
    ],
    { begin: false },
  );
  utcSessions.add(conn);
}

/**
 * COMMIT, and proof that it committed: PostgreSQL answers COMMIT of a
 * transaction that already failed with a ROLLBACK tag and no error, so a
 * statement error that something swallowed would otherwise lose the whole
 * transaction silently. That is a bug, and it fails loudly here.
 */
/**
 * The final writes and COMMIT in one round trip (with START TRANSACTION first when nothing opened it yet); the
 * server stops at the first failing statement, and the runner then rolls back. PostgreSQL needs every parameter
 * inlined for a batch: otherwise the writes go one by one and COMMIT after them.
 */
async function commitFinals(
  qr: QueryRunner,
  dialect: Dialect,
  finals: readonly Statement[],
  begin: boolean,
): Promise<StatementResult[]> {
  if (dialect === 'postgres' && !finals.every((s) => inlinable(s.params))) {
    if (begin) await qr.query('START TRANSACTION');
    const out: StatementResult[] = [];
    for (const s of finals) out.push(await queryOne(qr, dialect, s));
    await commit(qr, dialect);
    return out;
  }
  const results = await sendBatch(qr, dialect, [...finals, { sql: 'COMMIT', params: [] }], { begin });
  const last = results[results.length - 1];
  if (dialect === 'postgres' && last?.command !== 'COMMIT') {
    throw new Error(
      `internal: COMMIT answered ${String(last?.command)}: a statement of this transaction failed unseen`,
    );
  }
  return results.slice(0, finals.length);
}

/**
 * `commitFinals`, settling the statements the body left unsent that went with it (`Tx.takeUnsent`): an
 * expected write's or fence's wrong count is reported as its own mismatch; a plain statement gets its result.
 */
async function commitChecked(
  qr: QueryRunner,
  dialect: Dialect,
  finals: readonly Statement[],
  begin: boolean,
  unsent: readonly Pending[],
  /** How many of `finals`' first statements stand for each of `unsent` (`checkedStatements`). */
  counts: readonly number[],
): Promise<StatementResult[]> {
  let results: StatementResult[];
  try {
    results = await commitFinals(qr, dialect, finals, begin);
  } catch (err) {
    const failed = checkedFailure(err);
    const item = failed === null ? undefined : unsent[failed.index];
    if (item?.check && failed) {
      item.resolve({ rows: [], affected: failed.affected });
      await item.check.answer;
    }
    for (const c of unsent) if (c !== item || !c.check) c.reject(err);
    throw err;
  }
  let at = 0;
  unsent.forEach((u, i) => {
    if (u.check) u.resolve({ rows: [], affected: u.check.affected });
    else u.resolve(results[at] as StatementResult);
    at += counts[i] ?? 1;
  });
  return results.slice(at);
}

async function commit(qr: QueryRunner, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') {
    await sendBatch(qr, dialect, [{ sql: 'COMMIT', params: [] }], { begin: false });
    return;
  }
  const conn = (await qr.connect()) as { query(sql: string): Promise<{ command?: string }> };
  const res = await conn.query('COMMIT');
  if (res.command !== 'COMMIT') {
    throw new Error(`internal: COMMIT answered ${String(res.command)}: a statement of this transaction failed unseen`);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function runTransaction<T>(
  db: Db,
  name: string,
  fn: (tx: Tx) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  let lostAttempts = 0;
  // A connection was lost during a COMMIT that `retryLostCommit` retried: giving up cannot say "nothing written".
  let lostCommitting = false;
  for (let attempt = 1; ; attempt++) {
    const qr = db.ds.createQueryRunner();
    let tx: Tx | undefined;
    let committing = false;
    let sentFinals = false;
    try {
      const conn = (await qr.connect()) as object;
      await ensureSession(qr, db.dialect);
      // READ COMMITTED is every connection's session default (ensureSession, data-source.ts).
      // START TRANSACTION goes out with the transaction's first statements (Tx.send).
      tx = new Tx(qr, db.dialect, db.dialect === 'postgres' || answersInsertReturning(conn));
      const result = await fn(tx);
      // Compare-and-sets (and fences, and with final writes every statement) still unsent travel with COMMIT,
      // a check made to fail on a wrong count (src/db/checked-commit.ts).
      const unsent = !tx.isRollbackOnly ? tx.takeUnsent() : [];
      await tx.expectations.settle(new Set(unsent.flatMap((u) => (u.check ? [u.check] : []))));
      await tx.close();
      const checked = checkedStatements(
        db.dialect,
        unsent.map((u) => ({ stmt: u.stmt, affected: u.check?.affected })),
      );
      const finals = [...checked.statements, ...tx.finalWrites];
      if (finals.length > 0 && !tx.isRollbackOnly) {
        committing = true;
        sentFinals = true;
        tx.settleFinals(await commitChecked(qr, db.dialect, finals, !tx.opened, unsent, checked.counts));
      } else if (tx.opened) {
        if (tx.isRollbackOnly) await qr.query('ROLLBACK');
        else {
          committing = true;
          await commit(qr, db.dialect);
        }
      }
      // A transaction that rolled back on purpose never sent its final statements.
      tx.settleFinals(new Error('internal: the transaction ended without its final statements'));
      return result;
    } catch (caught) {
      tx?.settleFinals(caught instanceof Error ? caught : new Error(String(caught)));
      await tx?.close();
      // A write sent without waiting (`Tx.expect`) that did not take explains what failed after it.
      const err = isConnectionLost(caught) ? caught : (tx?.expectations.firstMismatch ?? caught);
      if (isConnectionLost(err)) {
        countConnectionLoss();
        discardConnection(qr, db.dialect, err);
        lostCommitting ||= committing;
        if (committing && !options.retryLostCommit) {
          throw new TaskLedgerError(
            'commit_outcome_unknown',
            `${name}: the database connection was lost during COMMIT; the command may or may not have taken effect`,
            { command: name },
            { cause: err },
          );
        }
        // The server rolled back what this connection held: nothing of this attempt was written.
        if (++lostAttempts >= LOST_ATTEMPTS) {
          if (lostCommitting) {
            throw new TaskLedgerError(
              'commit_outcome_unknown',
              `${name}: the database connection was lost ${lostAttempts} times, once during COMMIT; the command may or may not have taken effect`,
              { command: name },
              { cause: err },
            );
          }
          throw new TaskLedgerError(
            'database_unavailable',
            `${name}: the database connection was lost ${lostAttempts} times; nothing was written`,
            { command: name },
            { cause: err },
          );
        }
        options.onRetry?.(attempt, err);
        await sleep(backoff(LOST_BACKOFF_BASE_MS, LOST_BACKOFF_CAP_MS, lostAttempts));
        continue;
      }
      if (tx?.opened || sentFinals) {
        await qr.query('ROLLBACK').catch(() => undefined);
      }
      const unique = uniqueViolationConstraint(err);
      const restart = isRetryableError(err) || (unique !== null && (options.restartOnUnique ?? []).includes(unique));
      if (!restart) throw err;
      if (attempt - lostAttempts >= MAX_ATTEMPTS) {
        throw new TaskLedgerError(
          'retry_exhausted',
          `${name}: gave up after ${attempt} deadlock/serialization retries`,
          {
            command: name,
          },
          { cause: err },
        );
      }
      options.onRetry?.(attempt, err);
      await sleep(backoff(BACKOFF_BASE_MS, BACKOFF_CAP_MS, attempt - lostAttempts));
    } finally {
      await qr.release();
    }
  }
}

/** Capped exponential backoff with jitter: between half and all of min(cap, base * 2^(n-1)). */
function backoff(baseMs: number, capMs: number, n: number): number {
  const cap = Math.min(capMs, baseMs * 2 ** (n - 1));
  return cap / 2 + Math.random() * (cap / 2);
}

/**
 * Keeps a dead connection out of the pool, so no later query (of any caller) is handed it. mysql2 may hand a
 * pooled connection out again before it notices the server closed it, so it is destroyed. A pg client can
 * reach the pool before its socket reports the kill, so TypeORM releases it with the error, which makes
 * pg-pool drop it (the runner's own `release()` is then a no-op).
 */
function discardConnection(qr: QueryRunner, dialect: Dialect, err: unknown): void {
  try {
    if (dialect === 'mysql') {
      (qr as unknown as { databaseConnection?: { destroy?: () => void } }).databaseConnection?.destroy?.();
      return;
    }
    const pgQr = qr as unknown as { releasePostgresConnection?: (e: unknown) => Promise<void> };
    void pgQr.releasePostgresConnection?.(err).catch(() => undefined);
  } catch {
    // Already gone.
  }
}

/**
 * One non-transactional read (autocommit), for lookups outside any command.
 * Its connection gets the same session settings as a transaction's (UTC on
 * MySQL), so `NOW(3)` in a background query compares with stored UTC times.
 * Reads issued together (`Promise.all`, within a few microtask turns) travel
 * as one multi-statement round trip on one connection (`Coalescer`); when
 * that batch fails, each read runs alone, so every caller gets its own
 * answer or its own error.
 */
export function readRows<T = Record<string, unknown>>(db: Db, sql: string, params: SqlParam[] = []): Promise<T[]> {
  let c = readCoalescers.get(db);
  if (!c) {
    c = new Coalescer((batch) => readTogether(db, batch));
    readCoalescers.set(db, c);
  }
  return c.add({ sql, params }) as Promise<T[]>;
}

const readCoalescers = new WeakMap<Db, Coalescer<Statement, Record<string, unknown>[]>>();

async function readTogether(db: Db, batch: Queued<Statement, Record<string, unknown>[]>[]): Promise<void> {
  const together = batch.length > 1 && (db.dialect === 'mysql' || batch.every((q) => inlinable(q.item.params)));
  if (together) {
    let results: StatementResult[] | null = null;
    try {
      results = await withLostRetry(() =>
        readOnce(
          db,
          batch.map((q) => q.item),
        ),
      );
    } catch (err) {
      if (isTaskLedgerError(err, 'database_unavailable')) {
        for (const q of batch) q.reject(err);
        return;
      }
      // One read failed the batch: each runs alone below and answers for itself.
    }
    if (results) {
      batch.forEach((q, i) => q.resolve(results[i]!.rows));
      return;
    }
  }
  await Promise.all(
    batch.map((q) =>
      withLostRetry(() => readOnce(db, [q.item])).then(
        (r) => q.resolve(r[0]!.rows),
        (err: unknown) => q.reject(err),
      ),
    ),
  );
}

/** A read has no effect, so a lost connection simply reads again (up to LOST_ATTEMPTS, as a transaction would). */
async function withLostRetry<T>(read: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (err) {
      if (!isConnectionLost(err)) throw err;
      countConnectionLoss();
      if (attempt >= LOST_ATTEMPTS) {
        throw new TaskLedgerError(
          'database_unavailable',
          `the database connection was lost ${attempt} times during a read`,
          {},
          { cause: err },
        );
      }
      await sleep(backoff(LOST_BACKOFF_BASE_MS, LOST_BACKOFF_CAP_MS, attempt));
    }
  }
}

/**
 * One statement outside a transaction. On PostgreSQL, with values it can inline, it goes as a batch of one, so
 * that it runs prepared when it recurs (src/db/pg-prepared.ts); a failure the next attempt avoids
 * (`preparedRestart`: nothing ran) is tried once more.
 */
async function runAlone(qr: QueryRunner, dialect: Dialect, sql: string, params: SqlParam[]): Promise<StatementResult> {
  // MySQL: as it is, through the driver's callback API (ADR 0045); it fills any value on the client.
  if (dialect === 'mysql')
    return (await sendBatch(qr, dialect, [{ sql, params }], { begin: false, prepare: false }))[0] as StatementResult;
  if (inlinable(params)) {
    try {
      return (await sendBatch(qr, dialect, [{ sql, params }], { begin: false }))[0] as StatementResult;
    } catch (err) {
      if (!driverErrorOf(err).preparedRestart) throw err;
      return (await sendBatch(qr, dialect, [{ sql, params }], { begin: false }))[0] as StatementResult;
    }
  }
  return queryOne(qr, dialect, { sql, params });
}

/**
 * One parameterized statement through TypeORM (PostgreSQL's extended protocol, for values it cannot inline; MySQL's
 * go through `sendBatch`, ADR 0045): its rows and affected count.
 */
async function queryOne(qr: QueryRunner, dialect: Dialect, s: Statement): Promise<StatementResult> {
  const res = await qr.query(toDialectSql(dialect, s.sql), [...s.params], true);
  const rows = (res.records ?? []) as Record<string, unknown>[];
  // A SELECT counts the rows it answered, as in a batch (src/db/batch.ts): a fence sent alone (ADR 0028).
  return { rows, affected: /^\s*SELECT\b/i.test(s.sql) ? rows.length : Number(res.affected ?? 0) };
}

async function readOnce(db: Db, statements: Statement[]): Promise<StatementResult[]> {
  const qr = db.ds.createQueryRunner();
  try {
    await qr.connect();
    if (db.dialect === 'mysql') await ensureSession(qr, db.dialect);
    if (statements.length === 1) {
      const s = statements[0] as Statement;
      return [await runAlone(qr, db.dialect, s.sql, [...s.params])];
    }
    return await sendBatch(qr, db.dialect, statements, { begin: false });
  } catch (err) {
    if (isConnectionLost(err)) discardConnection(qr, db.dialect, err);
    throw err;
  } finally {
    await qr.release();
  }
}

/**
 * One write statement in autocommit — its own one-statement transaction,
 * one round trip instead of a transaction's two — for a statement that locks
 * a single row (no tier order is at stake). Returns the affected row count.
 *
 * `execIdempotent` is for a compare-and-set that may run twice: applying it
 * again must give the answer applying it once gives (a lease renewal by the
 * claim's own owner). A lost connection runs it again, as `readRows` does.
 *
 * `execOnce` is for any other single write: a connection lost while the
 * statement was on the wire throws `commit_outcome_unknown` (it may or may
 * not have taken effect; the caller asks the ledger again), as a transaction
 * whose COMMIT was lost does. A connection that failed before the statement
 * was sent is retried.
 */
export function execIdempotent(db: Db, sql: string, params: SqlParam[] = []): Promise<number> {
  return execAutocommit(db, sql, params, true);
}

export function execOnce(db: Db, name: string, sql: string, params: SqlParam[] = []): Promise<number> {
  return execAutocommit(db, sql, params, false, name);
}

async function execAutocommit(
  db: Db,
  sql: string,
  params: SqlParam[],
  idempotent: boolean,
  name = 'write',
): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const qr = db.ds.createQueryRunner();
    let sent = false;
    try {
      await qr.connect();
      if (db.dialect === 'mysql') await ensureSession(qr, db.dialect);
      sent = true;
      return (await runAlone(qr, db.dialect, sql, params)).affected;
    } catch (err) {
      if (!isConnectionLost(err)) throw err;
      discardConnection(qr, db.dialect, err);
      countConnectionLoss();
      if (sent && !idempotent) {
        throw new TaskLedgerError(
          'commit_outcome_unknown',
          `${name}: the database connection was lost during the statement; it may or may not have taken effect`,
          { command: name },
          { cause: err },
        );
      }
      if (attempt >= LOST_ATTEMPTS) {
        throw new TaskLedgerError(
          'database_unavailable',
          `the database connection was lost ${attempt} times during a one-statement write`,
          {},
          { cause: err },
        );
      }
      await sleep(backoff(LOST_BACKOFF_BASE_MS, LOST_BACKOFF_CAP_MS, attempt));
    } finally {
      await qr.release();
    }
  }
}

/** MySQL returns booleans as 0/1. */
export function bool(v: unknown): boolean {
  return v === true || v === 1 || v === '1';
}
