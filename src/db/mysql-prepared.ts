/**
 * Server-side prepared statements for MariaDB batches (docs/adr/0043-mariadb-prepared-statements.md), as
 * PostgreSQL's (src/db/pg-prepared.ts, ADR 0017).
 *
 * A MySQL batch is one multi-statement text whose `?` the driver (mysql2) fills with escaped literals, so MariaDB
 * parsed every statement on every call. Here a statement that recurs is prepared once per connection
 * (`PREPARE tl_<n> FROM ?`, its text passed as a literal and sent at the front of the batch that first needs it)
 * and runs as `EXECUTE tl_<n> USING ?, ...`: the same values, filled by the driver the same way, so a statement
 * means exactly what it meant inlined. The server keeps the parse; MariaDB still optimizes each execution.
 *
 * MariaDB only: `EXECUTE ... USING` takes literals there (10.2.3 and later); MySQL 8 takes user variables only,
 * so on MySQL (told apart by the server's handshake) every statement stays inlined.
 *
 * Contract: `mysqlBatchTexts(conn, statements)` returns the batch's `lead` statements (the PREPAREs it needs), one
 * `body` statement per statement in order, and `settle(ok, err)` to call once the batch answered or failed. After a
 * batch that failed, which of its PREPAREs ran is unknown: the connection's record is cleared, and the next batch
 * prepares again what it needs (a PREPARE under a name already held replaces it). A statement found missing
 * (1243), or texts the server would not prepare or execute as written (1295, 1210, 1064), or the server's own bound
 * on prepared statements reached (1461: this process stops preparing), restart the transaction
 * (`preparedRestart`): the caller never sees it. `TASKLEDGER_MYSQL_PREPARE=0` turns it off.
 */
import { markUnpreparable, MAX_PER_CONNECTION, preparedNameFor, settleWith } from './prepared-texts';
import type { Statement } from './statement';

const enabled = process.env.TASKLEDGER_MYSQL_PREPARE !== '0';

/** 1243: no such prepared statement on this connection (this process's record was wrong). */
const MISSING = 1243;
/** 1461: the server holds `max_prepared_stmt_count` statements already. */
const SERVER_FULL = 1461;
/** Not preparable, or not executable with these values, as written: 1295 unsupported, 1210 arguments, 1064 syntax. */
const UNPREPARABLE = new Set([1295, 1210, 1064]);

let serverFull = false;

interface ConnState {
  names: Set<string>;
}

const connections = new WeakMap<object, ConnState | null>();

/** The connection's record, or null where statements are not prepared (MySQL, or a server of unknown flavour). */
function connState(conn: object): ConnState | null {
  let s = connections.get(conn);
  if (s === undefined) {
    // mysql2 keeps the server's handshake: MariaDB names itself in its version.
    s = isMariaDbConnection(conn) ? { names: new Set() } : null;
    connections.set(conn, s);
  }
  return s;
}

/** The server version a mysql2 connection's handshake names ("5.5.5-10.11.19-MariaDB-0+deb12u1", "8.4.3"). */
function serverVersion(conn: object): string | null {
  const version = (conn as { _handshakePacket?: { serverVersion?: unknown } })._handshakePacket?.serverVersion;
  return typeof version === 'string' ? version : null;
}

/** Whether a mysql2 connection's server is MariaDB: its handshake's version names it; MySQL 8's does not. */
function isMariaDbConnection(conn: object): boolean {
  return /MariaDB/i.test(serverVersion(conn) ?? '');
}

/**
 * Whether a mysql2 connection's server answers `INSERT ... RETURNING`: MariaDB from 10.5 on (its handshake reads
 * "5.5.5-<major>.<minor>.<patch>-MariaDB..." behind the old replication prefix). MySQL 8 never does; a version
 * this cannot read counts as no.
 */
export function answersInsertReturning(conn: object): boolean {
  if (!isMariaDbConnection(conn)) return false;
  const m = /(?:^5\.5\.5-)?(\d+)\.(\d+)\.\d+/.exec(serverVersion(conn)!);
  if (!m) return false;
  const [major, minor] = [Number(m[1]), Number(m[2])];
  return major > 10 || (major === 10 && minor >= 5);
}

export interface MysqlBatchTexts {
  /** Statements to run before the body (their results are not the caller's). */
  lead: Statement[];
  /** One statement per statement of the batch, in order. */
  body: Statement[];
  settle(ok: boolean, err?: unknown): void;
}

export function mysqlBatchTexts(conn: object, statements: readonly Statement[]): MysqlBatchTexts {
  const state = enabled && !serverFull ? connState(conn) : null;
  if (state === null) return { lead: [], body: [...statements], settle: () => undefined };
  const preparing: { name: string; sql: string }[] = [];
  const body = statements.map((s): Statement => {
    const name = preparedNameFor(s.sql);
    if (name === null) return s;
    if (!state.names.has(name) && !preparing.some((p) => p.name === name)) {
      if (state.names.size + preparing.length >= MAX_PER_CONNECTION) return s;
      preparing.push({ name, sql: s.sql });
    }
    const marks = s.params.map(() => '?').join(', ');
    return { sql: marks === '' ? `EXECUTE ${name}` : `EXECUTE ${name} USING ${marks}`, params: s.params };
  });
  return {
    lead: preparing.map((p) => ({ sql: `PREPARE ${p.name} FROM ?`, params: [p.sql] })),
    body,
    settle: settleWith(state.names, preparing, (d) => {
      const missing = d.errno === MISSING;
      if (preparing.length === 0 && !missing) return;
      // Which PREPAREs ran is unknown (or the record was wrong): the next batch here prepares what it needs again.
      state.names.clear();
      const full = d.errno === SERVER_FULL;
      if (full) serverFull = true;
      const cannot = preparing.length > 0 && UNPREPARABLE.has(d.errno ?? 0);
      if (cannot)
        markUnpreparable(
          preparing.map((p) => p.sql),
          `${d.errno}: ${d.message}`,
        );
      if (missing || full || cannot) d.preparedRestart = true;
    }),
  };
}
