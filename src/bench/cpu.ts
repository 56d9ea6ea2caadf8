/**
 * CPU accounting from /proc (Linux): where the machine's CPU time goes during
 * a run — the API process, the worker processes, the database server, Redis,
 * the bench process itself and everything else — so the report can say what
 * one creation costs and what limits throughput. Off Linux every reading is
 * null and the report leaves the line out.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Dialect } from '../db/config';

/** USER_HZ: /proc reports CPU time in ticks of 1/100 s on every Linux build that matters. */
const MS_PER_TICK = 10;

/** utime + stime of a process, in ms; null when it is gone or /proc is unavailable. */
export function processCpuMs(pid: number): number | null {
  return processCpu(pid)?.self ?? null;
}

/**
 * utime + stime (`self`), stime alone (`kernel`: system calls, the loopback network stack, page faults) and the
 * CPU of its reaped children (`children`: Git, agents), in ms.
 */
export function processCpu(pid: number): { self: number; kernel: number; children: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces; the fields after it start at the last ')'.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      self: (Number(f[11]) + Number(f[12])) * MS_PER_TICK,
      kernel: Number(f[12]) * MS_PER_TICK,
      children: (Number(f[13]) + Number(f[14])) * MS_PER_TICK,
    };
  } catch {
    return null;
  }
}

/** Busy and total CPU time of the whole machine (all cores), in ms. */
export function machineCpuMs(): { busy: number; total: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const [, ...v] = line.trim().split(/\s+/);
    const n = v.map(Number);
    const idle = (n[3] ?? 0) + (n[4] ?? 0);
    const total = n.slice(0, 8).reduce((a, b) => a + b, 0);
    return { busy: (total - idle) * MS_PER_TICK, total: total * MS_PER_TICK };
  } catch {
    return null;
  }
}

/** PIDs whose command name (/proc/<pid>/comm) is one of `names`. */
export function pidsNamed(names: readonly string[]): number[] {
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const comm = readFileSync(`/proc/${e}/comm`, 'utf8').trim();
      if (names.includes(comm)) out.push(Number(e));
    } catch {
      // Exited while we looked.
    }
  }
  return out;
}

/** Live child processes of `parents` (the agent spawner helpers of the workers, src/launch/spawner.ts). */
export function liveChildren(parents: readonly number[]): number[] {
  const want = new Set(parents);
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (want.has(ppid)) out.push(Number(e));
    } catch {
      // Exited while we looked.
    }
  }
  return out;
}

export const DATABASE_PROCESS_NAMES = ['postgres', 'mariadbd', 'mysqld'];

/**
 * The server processes of the dialect being measured, or every database server's without one. The other
 * dialect's server (idle, or still flushing what an earlier run wrote) is not this run's database: it counts
 * as "other".
 */
export function databaseProcessNames(dialect?: Dialect): readonly string[] {
  if (dialect === 'postgres') return ['postgres'];
  if (dialect === 'mysql') return ['mariadbd', 'mysqld'];
  return DATABASE_PROCESS_NAMES;
}
export const REDIS_PROCESS_NAMES = ['redis-server'];

export interface CpuSnapshot {
  machine: { busy: number; total: number } | null;
  perPid: Map<number, number>;
  /** The part of `perPid` spent in the kernel (stime), by PID. */
  kernelPerPid: Map<number, number>;
  /** CPU of each process's reaped children (Git, agents), by PID. */
  children: Map<number, number>;
  /** Live children of the given processes (agent spawner helpers): their own CPU plus their reaped children's. */
  helpers: Map<number, number>;
  /** Database server and Redis processes alive at the snapshot (PostgreSQL starts one per connection). */
  database: number[];
  redis: number[];
  bench: number;
}

export function snapshotCpu(pids: readonly number[], dialect?: Dialect): CpuSnapshot {
  const perPid = new Map<number, number>();
  const kernelPerPid = new Map<number, number>();
  const children = new Map<number, number>();
  const database = pidsNamed(databaseProcessNames(dialect));
  const redis = pidsNamed(REDIS_PROCESS_NAMES);
  for (const pid of new Set([...pids, ...database, ...redis])) {
    const cpu = processCpu(pid);
    if (cpu === null) continue;
    perPid.set(pid, cpu.self);
    kernelPerPid.set(pid, cpu.kernel);
    children.set(pid, cpu.children);
  }
  const helpers = new Map<number, number>();
  for (const pid of liveChildren(pids)) {
    const cpu = processCpu(pid);
    if (cpu !== null) helpers.set(pid, cpu.self + cpu.children);
  }
  const u = process.cpuUsage();
  return {
    machine: machineCpuMs(),
    perPid,
    kernelPerPid,
    children,
    helpers,
    database,
    redis,
    bench: (u.user + u.system) / 1000,
  };
}

/**
 * Snapshots now, then re-reads the database and Redis processes every
 * `everyMs` until `finish()`: a PostgreSQL backend whose connection closes
 * mid-run still counts, with the CPU it had when last seen.
 */
export function trackCpu(
  pids: readonly number[],
  options: { everyMs?: number; dialect?: Dialect } = {},
): { before: CpuSnapshot; finish(): CpuSnapshot } {
  const { everyMs = 500, dialect } = options;
  const before = snapshotCpu(pids, dialect);
  const lastSeen = new Map<number, { kind: 'database' | 'redis'; cpu: number; kernel: number }>();
  const tick = () => {
    for (const [kind, names] of [
      ['database', databaseProcessNames(dialect)],
      ['redis', REDIS_PROCESS_NAMES],
    ] as const) {
      for (const pid of pidsNamed(names)) {
        const cpu = processCpu(pid);
        if (cpu !== null) lastSeen.set(pid, { kind, cpu: cpu.self, kernel: cpu.kernel });
      }
    }
  };
  // Unref'd: a run that fails before finish() must not be kept alive by it.
  const timer = setInterval(tick, everyMs).unref();
  return {
    before,
    finish() {
      clearInterval(timer);
      const after = snapshotCpu(pids, dialect);
      for (const [pid, seen] of lastSeen) {
        if (after.perPid.has(pid)) continue;
        after.perPid.set(pid, seen.cpu);
        after.kernelPerPid.set(pid, seen.kernel);
        after[seen.kind].push(pid);
      }
      return after;
    },
  };
}

export interface CpuBreakdown {
  /** CPU ms per creation, by consumer. */
  api: number;
  workers: number;
  /** Processes the API and workers started: Git (rev-parse, worktrees), the agent spawner helpers and the agents. */
  subprocesses: number;
  database: number;
  redis: number;
  bench: number;
  /** Everything else on the machine (other users' work included). */
  other: number;
  /** Share of the machine's CPU time that was busy during the run. */
  machineBusy: number;
  /**
   * The part of `api`, `workers` and `database` spent in the kernel (stime). A CPU profile counts a process
   * preempted inside a socket write as time in that write; this says how much of its CPU the kernel really took.
   */
  kernel: { api: number; workers: number; database: number };
}

/**
 * Per-creation CPU between two snapshots. A process that started in between
 * counts from zero; one that exited in between (a PostgreSQL backend whose
 * pooled connection closed) is lost, so the database figure is a lower bound.
 */
export function cpuPerCreation(
  before: CpuSnapshot,
  after: CpuSnapshot,
  groups: { api: number[]; workers: number[] },
  creations: number,
): CpuBreakdown | null {
  if (!before.machine || !after.machine || creations <= 0) return null;
  const delta = (pid: number, of: 'perPid' | 'kernelPerPid' = 'perPid') =>
    Math.max(0, (after[of].get(pid) ?? 0) - (before[of].get(pid) ?? 0));
  const sum = (pids: readonly number[], of: 'perPid' | 'kernelPerPid' = 'perPid') =>
    pids.reduce((a, p) => a + delta(p, of), 0);
  const db = after.database;
  const redis = after.redis;
  const api = sum(groups.api);
  const workers = sum(groups.workers);
  const reaped = [...groups.api, ...groups.workers].reduce(
    (a, p) => a + Math.max(0, (after.children.get(p) ?? 0) - (before.children.get(p) ?? 0)),
    0,
  );
  // A helper started during the run counts from zero; one that exited in between is lost (a lower bound).
  const helpers = [...after.helpers].reduce((a, [p, ms]) => a + Math.max(0, ms - (before.helpers.get(p) ?? 0)), 0);
  const subprocesses = reaped + helpers;
  const database = sum(db);
  const redisMs = sum(redis);
  const bench = after.bench - before.bench;
  const busy = after.machine.busy - before.machine.busy;
  const total = after.machine.total - before.machine.total;
  return {
    api: api / creations,
    workers: workers / creations,
    subprocesses: subprocesses / creations,
    database: database / creations,
    redis: redisMs / creations,
    bench: bench / creations,
    other: Math.max(0, busy - api - workers - subprocesses - database - redisMs - bench) / creations,
    machineBusy: total > 0 ? busy / total : 0,
    kernel: {
      api: sum(groups.api, 'kernelPerPid') / creations,
      workers: sum(groups.workers, 'kernelPerPid') / creations,
      database: sum(db, 'kernelPerPid') / creations,
    },
  };
}
