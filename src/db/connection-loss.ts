/**
 * Connection loss: recognising it, and the one rule for what it means.
 *
 * A database connection can drop at any moment: the server restarts, an
 * operator or a proxy kills it (`pg_terminate_backend`, `KILL CONNECTION`),
 * the network resets. The server then rolls back whatever transaction the
 * connection held, so a command whose COMMIT was never sent wrote nothing and
 * may run again from the start (src/db/tx.ts does). A connection lost while
 * COMMIT was on the wire leaves the outcome unknown to this process: that is
 * reported as `commit_outcome_unknown`, never retried blindly, and the ledger
 * settles it (a step's lease expires and the reaper observes; a producer asks
 * again by external ID and gets the one task).
 *
 * Contract: `isConnectionLost(err)` is true only for errors that mean "this
 * connection is gone" (never for a statement error on a live connection),
 * for both drivers (pg, mysql2) and for TypeORM's wrappers of them. The count
 * of losses seen by this process is kept here for the metrics registry
 * (`taskledger_db_connections_lost_total`).
 */

interface DriverLike {
  code?: unknown;
  errno?: unknown;
  message?: unknown;
  driverError?: DriverLike;
  cause?: unknown;
}

/**
 * PostgreSQL SQLSTATE class 08 (connection exception) and 57P01..57P03
 * (admin shutdown, crash shutdown, cannot connect now): the server ended or
 * refused the session.
 */
function isPgConnectionCode(code: string): boolean {
  return code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03';
}

/** Socket-level failures, as Node reports them for either driver. */
const SOCKET_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'ENOTCONN', 'ECONNABORTED']);

/** mysql2's codes for a connection that is gone. */
const MYSQL_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ER_SERVER_SHUTDOWN',
  'ER_CONNECTION_KILLED',
  'ER_SERVER_GONE_ERROR',
  'ER_SERVER_LOST',
  'ER_CON_COUNT_ERROR',
]);

/** MySQL/MariaDB errnos: 1053 shutdown in progress, 1927 connection killed, 2006 gone away, 2013 lost, 1040 too many connections. */
const MYSQL_ERRNOS = new Set([1053, 1927, 2006, 2013, 1040]);

/**
 * Driver messages that carry no code: pg's "Connection terminated" and "not
 * queryable" after a socket error, mysql2's "closed state" for a pooled
 * connection the server already dropped, and TypeORM's "already released"
 * once it has discarded a connection whose socket failed under it.
 */
const MESSAGES = [
  /Connection terminated/i,
  /Client has encountered a connection error and is not queryable/i,
  /Client was closed and is not queryable/i,
  /connection is in closed state/i,
  /Connection lost/i,
  /Query runner already released/i,
  /timeout exceeded when trying to connect/i,
];

export function isConnectionLost(err: unknown): boolean {
  const seen = new Set<unknown>();
  let e: unknown = err;
  while (e && typeof e === 'object' && !seen.has(e)) {
    seen.add(e);
    const d = e as DriverLike;
    const code = typeof d.code === 'string' ? d.code : '';
    if (code !== '' && (SOCKET_CODES.has(code) || MYSQL_CODES.has(code))) return true;
    if (/^[0-9A-Z]{5}$/.test(code) && isPgConnectionCode(code)) return true;
    if (typeof d.errno === 'number' && MYSQL_ERRNOS.has(d.errno)) return true;
    const message = typeof d.message === 'string' ? d.message : '';
    if (MESSAGES.some((m) => m.test(message))) return true;
    e = d.driverError ?? d.cause;
  }
  return false;
}

let lost = 0;

/** Counts one lost connection (for `taskledger_db_connections_lost_total`). */
export function countConnectionLoss(): void {
  lost++;
}

/** Connections this process has seen lost since it started. */
export function connectionsLost(): number {
  return lost;
}
