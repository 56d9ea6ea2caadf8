/**
 * Server-side prepared statements for PostgreSQL batches
 * (docs/adr/0017-prepared-statements.md).
 *
 * A statement that recurs is prepared once per connection (a `Parse` of
 * `tl_<n>` at the front of the batch that first needs it) and then run by
 * name with its parameters bound (`Bind`): the server reuses the parse tree
 * and, once it judges a generic plan good enough, the plan. A batch travels
 * as one pipeline of the extended protocol (src/db/pg-pipeline.ts, ADR
 * 0053); until ADR 0053 it was one simple-protocol text of `PREPARE` and
 * `EXECUTE tl_<n>(<literals>)`, which `describe()` still renders.
 *
 * Contract: `pgBatch(conn, statements, begin)` returns the pipeline steps of
 * one batch (leading steps first: `START TRANSACTION` with `begin`,
 * `DEALLOCATE ALL` when the connection's state is unknown, then the
 * prepares this batch needs), how many leading results are not the
 * caller's, and a `settle(ok)` to call once the batch answered or failed.
 * What a connection holds is known exactly after a batch that succeeded;
 * after one that failed, it is unknown (a prepared statement is not undone
 * by ROLLBACK, and an aborted transaction refuses one), so the next batch on
 * that connection starts with `DEALLOCATE ALL`. A statement the server could
 * not prepare (a parameter whose type it cannot infer) is inlined from then
 * on. Either failure, and a prepared statement found missing or already
 * there, restarts the transaction (`preparedRestart`): the caller never sees
 * it. A statement not prepared (seen once, over the bound, or unpreparable)
 * runs as the unnamed statement with its parameters inlined, as before.
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
import type { PipelineStep } from './pg-pipeline';
import { markUnpreparable, MAX_PER_CONNECTION, preparedNameFor, settleWith } from './prepared-texts';

/** The statement that opens a batch's transaction (both dialects). */
export const BEGIN = 'START TRANSACTION';

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

/** One batch as pipeline steps (src/db/pg-pipeline.ts), with how many of its results lead the caller's. */
export interface PgBatch {
  /** `START TRANSACTION` (with `begin`), `DEALLOCATE ALL` when the connection's state is unknown, the PREPAREs
   * this batch needs, then one step per statement. */
  steps: PipelineStep[];
  /** Results that are not the caller's (the leading statements run: `START TRANSACTION`, `DEALLOCATE ALL`). */
  leading: number;
  /** The batch as the simple-protocol text it stands for (PREPAREs, EXECUTEs, inlined statements). */
  describe: () => string;
  /**
   * Call once the batch answered (`ok`) or failed (`err`); a failure the next attempt avoids is marked
   * `preparedRestart` on the driver error (src/db/dialect.ts `isRetryableError`).
   */
  settle(ok: boolean, err?: unknown): void;
}

export function pgBatch(conn: object, statements: readonly Statement[], begin: boolean): PgBatch {
  const state = connState(conn);
  const steps: PipelineStep[] = [];
  if (begin) steps.push({ text: BEGIN });
  if (state.unknown) {
    steps.push({ text: 'DEALLOCATE ALL' });
    state.names.clear();
    state.unknown = false;
  }
  const leading = steps.length;
  const preparing: { name: string; sql: string }[] = [];
  const body: PipelineStep[] = statements.map((s) => {
    const name = enabled ? preparedNameFor(s.sql) : null;
    if (name === null) return { text: inlinePgParams(s.sql, s.params) };
    if (!state.names.has(name)) {
      if (state.names.size + preparing.length >= MAX_PER_CONNECTION) return { text: inlinePgParams(s.sql, s.params) };
      if (!preparing.some((p) => p.name === name)) {
        preparing.push({ name, sql: s.sql });
        steps.push({ parse: name, sql: toDialectSql('postgres', s.sql) });
      }
    }
    return { run: name, params: s.params };
  });
  steps.push(...body);
  const reset = leading > (begin ? 1 : 0) || preparing.length > 0;
  return {
    steps,
    leading,
    describe: () => steps.map(describeStep).join(';\n'),
    settle: settleWith(state.names, preparing, (d) => {
      const stateWrong = isPreparedStateError(d);
      if (!reset && !stateWrong) return;
      // Which of the lead steps ran is unknown (or the record was wrong): the next batch here starts from nothing.
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

function describeStep(step: PipelineStep): string {
  if ('parse' in step) return `PREPARE ${step.parse} AS ${step.sql}`;
  if ('run' in step) return `EXECUTE ${step.run}${pgLiteralList(step.params)}`;
  return step.text;
}

/** A prepared statement missing or already present: this process's record of a connection was wrong. */
function isPreparedStateError(d: DriverError): boolean {
  return d.code === '26000' || d.code === '42P05';
}
