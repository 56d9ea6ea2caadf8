/**
 * `taskledger bench` options: parsing, defaults and the `--quick` preset.
 *
 * The bench databases come from TASKLEDGER_BENCH_PG_URL and
 * TASKLEDGER_BENCH_MYSQL_URL (default: a database named `taskledger_bench` on
 * the local servers); each is dropped, recreated and migrated at the start of
 * its run, so never point them at a database you want to keep.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import type { Dialect } from '../db/config';

export const SHAPES = ['db', 'git'] as const;
export type Shape = (typeof SHAPES)[number];

export interface BenchOptions {
  dialects: Dialect[];
  /** Creations per shape in the closed-loop (throughput) run. */
  tasks: number;
  /** Worker processes (`taskledger start --roles steps,complete,outbox,launch,reaper`). */
  workers: number;
  /** Create requests in flight in the closed-loop run (and connections of the ceiling loop). */
  concurrency: number;
  /** Creations per second of the paced (open-loop) latency run. */
  rate: number;
  /** Length of the paced run in seconds. */
  pacedSeconds: number;
  shapes: Shape[];
  /** Shapes that also get a paced run. */
  pacedShapes: Shape[];
  /** Unmeasured creations per shape before the measured runs (JIT, pools, caches). */
  warmup: number;
  /**
   * Unmeasured DB-shape creations the fleet makes once, right after it starts and before any shape: three fresh
   * Node processes compile their hot code with V8's optimizing compiler over the first thousand or so creations,
   * and a short run would otherwise bill that one-off work to each creation it measures.
   */
  fleetWarmup: number;
  /** Run the launch role (agent command `true`) in the worker processes. */
  launch: boolean;
  /** Measure the raw-SQL ceiling. */
  ceiling: boolean;
  /** Run the reference peer (DBOS) before and after each dialect: false with --no-peer. */
  peer: boolean;
  /** The peer's script (--peer or TASKLEDGER_BENCH_PEER); null: ../shared/peers/dbos/run.sh when present. */
  peerScript: string | null;
  /** Seconds per peer run. */
  peerSeconds: number;
  /** Creations one at a time after the DB shape's throughput run (the serial-latency target); 0 skips. */
  serial: number;
  /** Worktrees of the bare `git worktree add -b` loop the Git shape is compared with; 0 skips. */
  gitBaseline: number;
  /** Write the results as JSON to this file. */
  json: string | null;
  /**
   * Where the run's scratch files go (the fleet's data directory with the agents' start markers, the Git
   * repositories and the baseline's worktrees): --scratch or TASKLEDGER_BENCH_SCRATCH, else `/dev/shm` when it is
   * a writable directory, else the OS temp directory (see `defaultScratch`).
   */
  scratch: string;
  pgUrl: string;
  mysqlUrl: string;
  redisUrl: string;
  quick: boolean;
}

export const BENCH_USAGE = `usage: taskledger bench [options]
  --dialect postgres|mysql|both   databases to measure (default both)
  --tasks N                       creations per shape in the throughput run (default 500)
  --workers M                     worker processes (default 2)
  --concurrency C                 create requests in flight; also the ceiling loop's connections (default 16)
  --rate R                        creations/s of the paced latency run (default 100)
  --paced-seconds S               length of the paced run (default 10)
  --shapes db,git                 creation shapes (default db,git)
  --paced-shapes db,git           shapes that also get a paced run (default db)
  --warmup N                      unmeasured creations per shape first (default 30)
  --fleet-warmup N                unmeasured DB-shape creations the fresh fleet makes once, before any shape,
                                  so its JIT compilation is done before anything is measured (default 3000:
                                  V8 compiles for about that many; 0 skips)
  --no-launch                     do not run the launch role (agents are never started)
  --no-ceiling                    skip the raw-SQL ceiling
  --serial N                      DB-shape creations one at a time, for the serial p50 (default 100; 0 skips)
  --git-baseline N                worktrees of the bare \`git worktree add -b\` loop, in the Git shape's own
                                  repository before it runs (default warmup + tasks, as many as the
                                  shape makes; removed again before the shape starts; 0 skips)
  --peer FILE                     the reference peer's script (default ../shared/peers/dbos/run.sh;
                                  also TASKLEDGER_BENCH_PEER); run before and after each dialect
  --peer-seconds S                length of each peer run (default 20)
  --no-peer                       do not run the peer (its ratios are then not measured)
  --json FILE                     also write the results as JSON
  --scratch DIR                   where the run's data directory and repositories go (default /dev/shm when
                                  writable, else the OS temp directory; also TASKLEDGER_BENCH_SCRATCH)
  --quick                         a smoke run: 40 tasks, 1 worker, concurrency 4, 10/s for 2 s, 10 serial
                                  creations, 10 baseline worktrees, 5 s peer runs, a 5-creation fleet warm-up
Databases: TASKLEDGER_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/taskledger_bench),
TASKLEDGER_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306/taskledger_bench); each is
DROPPED, recreated and migrated per run. Redis: TASKLEDGER_REDIS_URL (a fresh queue prefix per run).`;

export class BenchUsageError extends Error {}

/**
 * A RAM file system when the machine has one (`/dev/shm`), else the OS temp directory. The fleet writes a few
 * small files per launch (the start marker, its replacement, the agent's log); on a file system whose inode
 * allocator skips recently deleted inodes one by one (ext4 without a journal, as on the VM the figures in
 * docs/benchmarks.md come from), each of them pays for every file any run deleted in the last minutes, its own
 * cleanup included, so runs measured one after another on disk are not comparable. A deployment chooses its
 * data directory (TASKLEDGER_DATA_DIR); the bench measures the ledger, not that allocator.
 */
export function defaultScratch(): string {
  try {
    if (statSync('/dev/shm').isDirectory()) {
      accessSync('/dev/shm', constants.W_OK);
      return '/dev/shm';
    }
  } catch {
    // Not there or not writable: the temp directory.
  }
  return tmpdir();
}

function positiveInt(name: string, raw: string | undefined, fallback: number, min = 1): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min)
    throw new BenchUsageError(`--${name} must be an integer >= ${min} (got "${raw}")`);
  return n;
}

function positiveNumber(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new BenchUsageError(`--${name} must be a positive number (got "${raw}")`);
  return n;
}

function shapeList(name: string, raw: string | undefined, fallback: Shape[]): Shape[] {
  if (raw === undefined) return fallback;
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  for (const s of items) {
    if (!(SHAPES as readonly string[]).includes(s)) {
      throw new BenchUsageError(`--${name}: unknown shape "${s}" (known: ${SHAPES.join(', ')})`);
    }
  }
  return [...new Set(items)] as Shape[];
}

function dialects(raw: string | undefined): Dialect[] {
  switch (raw ?? 'both') {
    case 'both':
      return ['postgres', 'mysql'];
    case 'postgres':
    case 'pg':
      return ['postgres'];
    case 'mysql':
    case 'mariadb':
      return ['mysql'];
    default:
      throw new BenchUsageError(`--dialect must be postgres, mysql or both (got "${raw}")`);
  }
}

/** Parses the command line; `{help: true}` when --help was given. */
export function parseBenchArgs(args: string[], env: NodeJS.ProcessEnv = process.env): BenchOptions | { help: true } {
  let values;
  try {
    values = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        dialect: { type: 'string' },
        tasks: { type: 'string' },
        workers: { type: 'string' },
        concurrency: { type: 'string' },
        rate: { type: 'string' },
        'paced-seconds': { type: 'string' },
        shapes: { type: 'string' },
        'paced-shapes': { type: 'string' },
        warmup: { type: 'string' },
        'fleet-warmup': { type: 'string' },
        'no-launch': { type: 'boolean' },
        'no-ceiling': { type: 'boolean' },
        serial: { type: 'string' },
        'git-baseline': { type: 'string' },
        peer: { type: 'string' },
        'peer-seconds': { type: 'string' },
        'no-peer': { type: 'boolean' },
        json: { type: 'string' },
        scratch: { type: 'string' },
        quick: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    throw new BenchUsageError((err as Error).message);
  }
  if (values.help) return { help: true };
  const quick = values.quick === true;
  const shapes = shapeList('shapes', values.shapes, ['db', 'git']);
  if (shapes.length === 0) throw new BenchUsageError('--shapes names no shape');
  const pacedShapes = shapeList('paced-shapes', values['paced-shapes'], ['db']).filter((s) => shapes.includes(s));
  const tasks = positiveInt('tasks', values.tasks, quick ? 40 : 500);
  const warmup = positiveInt('warmup', values.warmup, quick ? 5 : 30, 0);
  return {
    dialects: dialects(values.dialect),
    tasks,
    workers: positiveInt('workers', values.workers, quick ? 1 : 2),
    concurrency: positiveInt('concurrency', values.concurrency, quick ? 4 : 16),
    rate: positiveNumber('rate', values.rate, quick ? 10 : 100),
    pacedSeconds: positiveNumber('paced-seconds', values['paced-seconds'], quick ? 2 : 10),
    shapes,
    pacedShapes,
    warmup,
    fleetWarmup: positiveInt('fleet-warmup', values['fleet-warmup'], quick ? 5 : 3000, 0),
    launch: values['no-launch'] !== true,
    ceiling: values['no-ceiling'] !== true,
    peer: values['no-peer'] !== true,
    peerScript: values.peer ?? null,
    peerSeconds: positiveNumber('peer-seconds', values['peer-seconds'], quick ? 5 : 20),
    serial: positiveInt('serial', values.serial, quick ? 10 : 100, 0),
    // As many worktrees as the Git shape makes: `worktree add` slows as a repository's worktrees grow.
    gitBaseline: positiveInt('git-baseline', values['git-baseline'], warmup + tasks, 0),
    json: values.json ?? null,
    scratch: values.scratch ?? (env.TASKLEDGER_BENCH_SCRATCH?.trim() || defaultScratch()),
    pgUrl: env.TASKLEDGER_BENCH_PG_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/taskledger_bench',
    mysqlUrl: env.TASKLEDGER_BENCH_MYSQL_URL?.trim() || 'mysql://root@127.0.0.1:3306/taskledger_bench',
    redisUrl: env.TASKLEDGER_REDIS_URL?.trim() || 'redis://127.0.0.1:6379',
    quick,
  };
}
