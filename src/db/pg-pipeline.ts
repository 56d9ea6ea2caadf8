/**
 * A PostgreSQL batch as one pipeline of the extended protocol
 * (docs/adr/0053-pg-batches-in-the-extended-protocol.md).
 *
 * Contract: `runPipeline(client, steps, describe)` writes, in one corked
 * socket write, each step's messages in order — `Parse` for a named
 * statement first prepared here (no result), and for a statement run:
 * `Parse` of an unnamed statement when it has no name, then `Bind` with its
 * parameters as text, `Describe` and `Execute` — and one `Sync` at the end.
 * It resolves with one result per statement run, in order (pg's `Query`
 * gathers them as for a multi-statement simple query). The server runs the
 * messages strictly in order, inside the one implicit or explicit
 * transaction the batch is in; the first error makes it skip everything up
 * to the `Sync`, and the promise rejects with that error. So a pipeline
 * keeps every property of the multi-statement text it replaces (one round
 * trip, statements in order, the first failure stops the rest), without the
 * server parsing `EXECUTE name(literals)` and evaluating each literal, and
 * without the client escaping every value into the text.
 *
 * `describe()` renders the batch as the simple-protocol text it stands for
 * (`PREPARE`, `EXECUTE name(literals)`, inlined statements), on demand only:
 * for an error's message and for the tests' and diagnostics' view of what
 * was sent (`text`).
 */
import pg from 'pg';
import type { SqlParam } from './statement';

/** One message group of a pipeline. */
export type PipelineStep =
  /** Prepare `name` for the statements after it (no result). */
  | { parse: string; sql: string }
  /** Run the statement prepared as `name` with these parameters. */
  | { run: string; params: readonly SqlParam[] }
  /** Run `sql` (no parameters) as the unnamed statement. */
  | { text: string };

interface PgConnection {
  stream: { cork?: () => void; uncork?: () => void };
  parse(msg: { text: string; name: string }): void;
  bind(msg: {
    portal: string;
    statement: string;
    values: readonly unknown[];
    valueMapper: (v: SqlParam) => string | null;
  }): void;
  describe(msg: { type: 'P'; name: string }): void;
  execute(msg: { portal: string }): void;
  sync(): void;
}

/** A parameter as the text the server's input function reads (what `EXECUTE`'s literal said). */
function asText(value: SqlParam): string | null {
  return value === null ? null : String(value);
}

const NO_PARAMS: readonly SqlParam[] = [];

/**
 * pg's own `Query` (its result gathering: one `Result` per statement, rows parsed by the client's type parsers,
 * the callback at `ReadyForQuery` or on the first error), with the submission replaced below.
 */
const QueryBase = pg.Query as unknown as new (
  config: { text: string },
  values: undefined,
  callback: (err: Error | undefined, res: unknown) => void,
) => object;

class Pipeline extends QueryBase {
  constructor(
    private readonly steps: readonly PipelineStep[],
    private readonly describe: () => string,
    callback: (err: Error | undefined, res: unknown) => void,
  ) {
    super({ text: '' }, undefined, callback);
  }

  /** What the batch sent, as the simple-protocol text it stands for (rendered when read). */
  get text(): string {
    return this.describe?.() ?? '';
  }

  set text(_: string) {
    // pg's constructor assigns the text it was given; the pipeline's is always rendered.
  }

  submit(connection: PgConnection): null {
    connection.stream.cork?.();
    try {
      for (const step of this.steps) {
        if ('parse' in step) {
          connection.parse({ text: step.sql, name: step.parse });
          continue;
        }
        let name = '';
        let params = NO_PARAMS;
        if ('run' in step) {
          name = step.run;
          params = step.params;
        } else connection.parse({ text: step.text, name: '' });
        connection.bind({ portal: '', statement: name, values: params, valueMapper: asText });
        connection.describe({ type: 'P', name: '' });
        connection.execute({ portal: '' });
      }
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }
}

/** Sends the pipeline on `client` and resolves with its results (an array with more than one). */
export function runPipeline(
  client: pg.PoolClient,
  steps: readonly PipelineStep[],
  describe: () => string,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const query = new Pipeline(steps, describe, (err, res) => (err ? reject(err) : resolve(res)));
    (client as unknown as { query(q: unknown): unknown }).query(query);
  });
}
