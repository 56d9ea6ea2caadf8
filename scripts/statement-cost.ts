/**
 * What one statement costs the database server, for weighing a lever before building it (docs/benchmarks.md,
 * the 12-08 session). Reads the server's own CPU time from /proc, so run it on the database's machine, on a bench
 * database a `taskledger bench` run has filled, with nothing else running. Two probes:
 *
 *   npx tsx scripts/statement-cost.ts mariadb-pipeline [--db mysql://root@127.0.0.1:3306/taskledger_bench]
 *     A batch of nine statements as the workers send them on MariaDB (a multi-statement text of
 *     `EXECUTE ... USING` literals, src/db/mysql-prepared.ts) against the same nine as binary-protocol executes
 *     written in one write (a pipeline, as src/db/pg-pipeline.ts does for PostgreSQL; mysql2 cannot, so this
 *     writes the packets itself). Inside a transaction that rolls back: nothing is written.
 *
 *   npx tsx scripts/statement-cost.ts pg-checks [--db postgres://postgres@127.0.0.1:5432/taskledger_bench]
 *     One UPDATE of a `task_creation_steps` row, as the workers make it, on three copies of the table in a scratch
 *     schema: with its CHECK constraints as migrated, with each one-column CHECK a domain of the column instead,
 *     and with none. PostgreSQL rebuilds a table's CHECK expressions from their stored text at every INSERT and
 *     UPDATE (`ExecConstraints` -> `stringToNode`); a domain's are cached, and checked only for the columns a
 *     statement assigns. The scratch schema is dropped at the end.
 *
 * Options: --rounds N (alternations, default 4), --count N (batches or updates per side and round).
 * Diagnostic only: nothing in taskledger loads it.
 */
import { Buffer } from 'node:buffer';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import mysql from 'mysql2';
import pg from 'pg';
import { pidsNamed, processCpuMs } from '../src/bench/cpu';

const require = createRequire(import.meta.url);
const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const at = args.indexOf(name);
  return at >= 0 ? (args[at + 1] ?? fallback) : fallback;
};
const probe = args[0];
const rounds = Number(option('--rounds', '4'));

/** The CPU of process `pid`, in ms (src/bench/cpu.ts); the probe cannot go on without it. */
function cpuMs(pid: number): number {
  const ms = processCpuMs(pid);
  if (ms === null) throw new Error(`process ${pid} is gone`);
  return ms;
}

/** Runs `fn` `count` times, after a warm-up; answers the server's CPU per call, in µs. */
async function serverCost(pid: number, count: number, fn: (i: number) => Promise<unknown>): Promise<number> {
  for (let i = 0; i < Math.min(300, count); i++) await fn(i);
  const before = cpuMs(pid);
  for (let i = 0; i < count; i++) await fn(i);
  return (1000 * (cpuMs(pid) - before)) / count;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

type Param = string | number;
type Row = Record<string, unknown>;

/** What this probe touches of mysql2's internals: a connection's queue and socket, a prepared statement's handle. */
interface Mysql2Internals {
  config: { clientFlags: number; charsetNumber: number; timezone: string };
  serverCapabilityFlags?: number;
  _isMariaDB: boolean;
  stream: { write(b: Buffer): boolean };
  addCommand(cmd: unknown): void;
}
interface Prepared {
  id: number;
  parameters: unknown;
}
interface CommandInternals {
  start: (this: unknown, packet: unknown, connection: ConnectionInternals) => unknown;
}
interface ConnectionInternals {
  writePacket: (packet: unknown) => void;
  _bumpSequenceId(n: number): void;
}
type ExecuteClass = new (
  options: { statement: Prepared; values: Param[]; sql: string },
  cb: (err: Error | null) => void,
) => CommandInternals;
type ExecutePacketClass = new (
  id: number,
  params: Param[],
  charset: number,
  timezone: string,
  attributes: undefined,
  flags: number,
  isMariaDb: boolean,
  parameters: unknown,
) => { toPacket(n: number): { writeHeader(seq: number): void; buffer: Buffer } };

async function mariadbPipeline(url: string, count: number): Promise<void> {
  // mysql2's own command and packet classes (not in its exports: loaded from its directory).
  const lib = join(dirname(require.resolve('mysql2')), 'lib');
  const Execute = require(join(lib, 'commands/execute.js')) as ExecuteClass;
  const Packets = require(join(lib, 'packets/index.js')) as { Execute: ExecutePacketClass };
  const conn = mysql.createConnection({ uri: url, multipleStatements: true });
  const internals = conn as unknown as Mysql2Internals;
  const query = (sql: string, params: Param[] = []) =>
    new Promise<unknown>((resolve, reject) => {
      conn.query(sql, params, (e, r) => (e ? reject(e) : resolve(r)));
    });
  const prepare = (sql: string) =>
    new Promise<Prepared>((resolve, reject) => {
      conn.prepare(sql, (e, p) => (e ? reject(e) : resolve(p as unknown as Prepared)));
    });
  const [op] = (await query(
    `SELECT o.id, o.workspace_id, o.task_id, s.id AS session_id FROM task_creation_operations o
       JOIN task_sessions s ON s.task_id = o.task_id ORDER BY o.id LIMIT 1`,
  )) as Record<string, string>[];
  if (!op) throw new Error(`${url} holds no creation: run taskledger bench --dialect mysql first`);
  await query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
  const body: [string, Param[]][] = [
    ['SELECT state FROM workspaces WHERE id = ? LOCK IN SHARE MODE', [op.workspace_id!]],
    ['SELECT id, state, workspace_id, task_id FROM task_creation_operations WHERE id = ? FOR UPDATE', [op.id!]],
    ['SELECT id, creation_state, lifecycle_state FROM tasks WHERE id = ? FOR UPDATE', [op.task_id!]],
    ['SELECT state, task_id, workspace_id FROM task_identities WHERE task_id = ? FOR UPDATE', [op.task_id!]],
    ['SELECT id, state, kind FROM task_creation_steps WHERE operation_id = ? ORDER BY id FOR UPDATE', [op.id!]],
    ['SELECT id, task_id FROM task_sessions WHERE id = ? FOR UPDATE', [op.session_id!]],
    ['SELECT id FROM executors_running WHERE session_id = ? LOCK IN SHARE MODE', [op.session_id!]],
    [
      `SELECT ~0 + ('probe' <> '' AND COUNT(*) <> 1) AS ok
         FROM (SELECT id FROM workspaces WHERE id = ? AND state = 'active' LOCK IN SHARE MODE) AS checked`,
      [op.workspace_id!],
    ],
    ['UPDATE tasks SET updated_at = updated_at WHERE id = ?', [op.task_id!]],
  ];
  for (let i = 0; i < body.length; i++) await query(`PREPARE cost_${i} FROM ?`, [body[i]![0]]);
  const text = [
    'START TRANSACTION',
    ...body.map(([, p], i) => `EXECUTE cost_${i}${p.length ? ` USING ${p.map(() => '?').join(', ')}` : ''}`),
    'ROLLBACK',
  ].join(';\n');
  const textParams = body.flatMap(([, p]) => p);
  const all: [string, Param[]][] = [['START TRANSACTION', []], ...body, ['ROLLBACK', []]];
  const statements: Prepared[] = [];
  for (const [sql] of all) statements.push(await prepare(sql));
  const flags = internals.config.clientFlags & (internals.serverCapabilityFlags ?? 0);
  // Every COM_STMT_EXECUTE in one write, each with sequence id 0; mysql2's own Execute commands read the answers,
  // one after another, their own packet left unwritten.
  const pipelined = () =>
    new Promise<void>((resolve, reject) => {
      const packets = all.map(([, params], i) => {
        const packet = new Packets.Execute(
          statements[i]!.id,
          params,
          internals.config.charsetNumber,
          internals.config.timezone,
          undefined,
          flags,
          internals._isMariaDB,
          statements[i]!.parameters,
        ).toPacket(1);
        packet.writeHeader(0);
        return packet.buffer;
      });
      internals.stream.write(Buffer.concat(packets));
      let left = all.length;
      all.forEach(([sql, params], i) => {
        const cmd = new Execute({ statement: statements[i]!, values: params, sql }, (err) => {
          if (err) reject(err);
          else if (--left === 0) resolve();
        });
        const start = cmd.start;
        cmd.start = function (packet, connection) {
          const write = connection.writePacket;
          connection.writePacket = () => connection._bumpSequenceId(1);
          try {
            return start.call(this, packet, connection);
          } finally {
            connection.writePacket = write;
          }
        };
        internals.addCommand(cmd);
      });
    });
  const [pid] = pidsNamed(['mariadbd']);
  if (pid === undefined) throw new Error('no mariadbd process on this machine: run the probe beside the server');
  const sides: Record<'text' | 'pipeline', number[]> = { text: [], pipeline: [] };
  for (let r = 0; r < rounds; r++) {
    sides.text.push(await serverCost(pid, count, () => query(text, textParams)));
    sides.pipeline.push(await serverCost(pid, count, pipelined));
    console.error(`round ${r + 1}: text ${sides.text[r]!.toFixed(0)} µs, pipeline ${sides.pipeline[r]!.toFixed(0)} µs`);
  }
  conn.end();
  const [t, p] = [mean(sides.text), mean(sides.pipeline)];
  console.log(
    `MariaDB server CPU per batch of ${body.length} statements: text ${t.toFixed(0)} µs, binary pipeline ` +
      `${p.toFixed(0)} µs (${((100 * (p - t)) / t).toFixed(1)} %), over ${rounds} × ${count} batches each`,
  );
}

async function pgChecks(url: string, count: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const q = <T extends Row = Row>(sql: string, params?: unknown[]) => client.query<T>(sql, params);
  const checks = (
    await q<{ conname: string; def: string }>(`SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
              WHERE conrelid = 'public.task_creation_steps'::regclass AND contype = 'c' ORDER BY conname`)
  ).rows;
  const types = new Map(
    (
      await q<{
        attname: string;
        type: string;
      }>(`SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
                WHERE a.attrelid = 'public.task_creation_steps'::regclass AND a.attnum > 0 AND NOT a.attisdropped`)
    ).rows.map((r) => [r.attname, r.type]),
  );
  await q('DROP SCHEMA IF EXISTS statement_cost CASCADE');
  await q('CREATE SCHEMA statement_cost');
  try {
    await q('CREATE TABLE statement_cost.as_migrated (LIKE public.task_creation_steps INCLUDING ALL)');
    await q(
      'CREATE TABLE statement_cost.unchecked (LIKE public.task_creation_steps INCLUDING DEFAULTS INCLUDING INDEXES)',
    );
    await q(
      'CREATE TABLE statement_cost.domains (LIKE public.task_creation_steps INCLUDING DEFAULTS INCLUDING INDEXES)',
    );
    for (const { conname, def } of checks) {
      const column = /^chk_task_creation_steps_(\w+)$/.exec(conname)?.[1];
      if (column && types.has(column)) {
        // A one-column CHECK (`chk_<table>_<column>`) as a domain of the column, its constraint of the same name.
        const own = def.replaceAll(`(${column})`, '(VALUE)');
        await q(`CREATE DOMAIN statement_cost.${column}_d AS ${types.get(column)} CONSTRAINT ${conname} ${own}`);
        await q(`ALTER TABLE statement_cost.domains ALTER COLUMN ${column} TYPE statement_cost.${column}_d`);
      } else {
        await q(`ALTER TABLE statement_cost.domains ADD CONSTRAINT ${conname} ${def}`);
      }
    }
    const tables = ['as_migrated', 'domains', 'unchecked'];
    for (const t of tables) {
      await q(`INSERT INTO statement_cost.${t} SELECT * FROM public.task_creation_steps ORDER BY id LIMIT 2000`);
    }
    const [row] = (await q<{ id: string }>('SELECT id FROM statement_cost.as_migrated ORDER BY id LIMIT 1')).rows;
    if (!row) throw new Error(`${url} holds no creation: run taskledger bench --dialect postgres first`);
    const pid = (await q<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const sides: Record<string, number[]> = Object.fromEntries(tables.map((t) => [t, []]));
    for (let r = 0; r < rounds; r++) {
      for (const t of tables) {
        const update = {
          name: `statement_cost_${t}`,
          text: `UPDATE statement_cost.${t} SET state = $1, generation = generation + 1, updated_at = now() WHERE id = $2`,
          values: ['planned', row.id],
        };
        sides[t]!.push(
          await serverCost(pid, count, (i) => {
            update.values[0] = i % 2 ? 'succeeded' : 'planned';
            return client.query(update);
          }),
        );
      }
      console.error(`round ${r + 1}: ${tables.map((t) => `${t} ${sides[t]![r]!.toFixed(0)} µs`).join(', ')}`);
    }
    console.log(
      `PostgreSQL backend CPU per task_creation_steps UPDATE (autocommit, its COMMIT included): ` +
        tables.map((t) => `${t.replace('_', ' ')} ${mean(sides[t]!).toFixed(0)} µs`).join(', ') +
        `, over ${rounds} × ${count} updates each`,
    );
  } finally {
    await q('DROP SCHEMA IF EXISTS statement_cost CASCADE');
    await client.end();
  }
}

if (probe === 'mariadb-pipeline') {
  await mariadbPipeline(
    option('--db', 'mysql://root@127.0.0.1:3306/taskledger_bench'),
    Number(option('--count', '4000')),
  );
} else if (probe === 'pg-checks') {
  await pgChecks(
    option('--db', 'postgres://postgres@127.0.0.1:5432/taskledger_bench'),
    Number(option('--count', '6000')),
  );
} else {
  console.error(
    'usage: npx tsx scripts/statement-cost.ts mariadb-pipeline|pg-checks [--db URL] [--rounds N] [--count N]',
  );
  process.exit(2);
}
