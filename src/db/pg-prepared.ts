/**
 * Server-side prepared statements for PostgreSQL batches
 * (docs/adr/0017-prepared-statements.md).
 *
 * A batch travels in the simple protocol with its parameters inlined
 * (src/db/batch.ts), so the server parsed, analysed and planned every
 * statement on every call: half of its CPU per creation. Here a statement
 * that recurs is prepared once per connection (`PREPARE tl_<n> AS ...`, sent
 * at the front of the batch that first needs it) and run as
 * `EXECUTE tl_<n>(<literals>)`; the server then reuses the parse tree and,
 * once it judges a generic plan good enough, the plan.
 *
 * Contract: `pgBatchTexts(conn, statements)` returns the statement texts of
 * one batch (`lead` texts first: `DEALLOCATE ALL` when the connection's
 * state is unknown, then the PREPAREs this batch needs) and a `settle(ok)`
 * to call once the batch answered or failed. What a connection holds is
 * known exactly after a batch that succeeded; after one that failed, it is
 * unknown (a PREPARE is not undone by ROLLBACK, and an aborted transaction
 * refuses one), so the next batch on that connection starts with
 * `DEALLOCATE ALL`. A statement the server could not prepare (a parameter
 * whose type it cannot infer) is inlined from then on. Either failure, and a
 * prepared statement found missing or already there, restarts the
 * transaction (`preparedRestart`): the caller never sees it.
 *
 * Only statements seen twice in this process are prepared, at most
 * `MAX_PER_CONNECTION` per connection (src/db/prepared-texts.ts, shared with
 * MySQL's, src/db/mysql-prepared.ts), so a text built with values in it never
 * fills a backend's memory.
 * `TASKLEDGER_PG_PREPARE=0` turns it off (a transaction-pooling proxy such as
 * PgBouncer cannot keep a session's prepared statements).
 */
import { toDialectSql, type DriverError } from './dialect';
import { inlinePgParams, pgLiteralList, type Statement } from './statement';
import { markUnpreparable, MAX_PER_CONNECTION, preparedNameFor, settleWith } from './prepared-texts';

/** Errors that say the server could not prepare a text as written (parameter types it cannot infer). */
const UNPREPARABLE_CODES = new Set(['42P18', '42P08', '42804', '42725', '42883']);

const enabled = process.env.TASKLEDGER_PG_PREPARE !== '0';

interface ConnState {
  names: Set<string>;
  unknown: boolean;
}

const connections = new WeakMap<object, ConnState>();

function connState(conn: object): ConnState {
  let s = connections.get(conn);
  if (!s) {
    s = { names: new Set(), unknown: false };
    connections.set(conn, s);
  }
  return s;
}

export interface PgBatchTexts {
  /** Texts to run before the statements (their results are not the caller's). */
  lead: string[];
  /** One text per statement, in order. */
  body: string[];
  /**
   * Call once the batch answered (`ok`) or failed (`err`); a failure the next attempt avoids is marked
   * `preparedRestart` on the driver error (src/db/dialect.ts `isRetryableError`).
   */
  settle(ok: boolean, err?: unknown): void;
}

export function pgBatchTexts(conn: object, statements: readonly Statement[]): PgBatchTexts {
  const state = connState(conn);
  const lead: string[] = [];
  if (state.unknown) {
    lead.push('DEALLOCATE ALL');
    state.names.clear();
    state.unknown = false;
  }
  const preparing: { name: string; sql: string }[] = [];
  const body = statements.map((s) => {
    const name = enabled ? preparedNameFor(s.sql) : null;
    if (name === null) return inlinePgParams(s.sql, s.params);
    if (!state.names.has(name)) {
      if (state.names.size + preparing.length >= MAX_PER_CONNECTION) return inlinePgParams(s.sql, s.params);
      if (!preparing.some((p) => p.name === name)) {
        preparing.push({ name, sql: s.sql });
        lead.push(`PREPARE ${name} AS ${toDialectSql('postgres', s.sql)}`);
      }
    }
    return `EXECUTE ${name}${pgLiteralList(s.params)}`;
  });
  const reset = lead.length > 0;
  return {
    lead,
    body,
    settle: settleWith(state.names, preparing, (d) => {
      const stateWrong = isPreparedStateError(d);
      if (!reset && !stateWrong) return;
      // Which of the lead texts ran is unknown (or the record was wrong): the next batch here starts from nothing.
      state.unknown = true;
      const cannotPrepare = preparing.length > 0 && UNPREPARABLE_CODES.has(d.code ?? '');
      if (cannotPrepare)
        markUnpreparable(
          preparing.map((p) => p.sql),
          `${d.code}: ${d.message}`,
        );
      // The next attempt runs without what failed here.
      if (stateWrong || cannotPrepare) d.preparedRestart = true;
    }),
  };
}

/** A prepared statement missing or already present: this process's record of a connection was wrong. */
function isPreparedStateError(d: DriverError): boolean {
  return d.code === '26000' || d.code === '42P05';
}
