/**
 * The shapes of a bench run's results: per paced run, per shape, per dialect
 * and the whole report (`--json FILE` writes `BenchReport`). Produced by
 * run.ts, checked by targets.ts, rendered by report.ts.
 */
import type { Dialect } from '../db/config';
import type { CeilingResult } from './ceiling';
import type { CpuBreakdown } from './cpu';
import type { GitBaseline } from './git-baseline';
import type { PeerRun } from './peer';
import type { BenchOptions, Shape } from './options';
import type { LatencySummary } from './stats';

export interface TargetCheck {
  name: string;
  met: boolean | null;
  detail: string;
}

export interface PacedResult {
  rate: number;
  seconds: number;
  /** rate × seconds. */
  planned: number;
  sent: number;
  /** The fleet fell more than two seconds of arrivals behind; sending stopped early. */
  overloaded: boolean;
  ok: number;
  failed: number;
  achievedPerSecond: number;
  latency: LatencySummary;
  dbClockLatency: LatencySummary | null;
}

export interface ShapeResult {
  shape: Shape;
  tasks: number;
  ok: number;
  failed: number;
  wallMs: number;
  creationsPerSecond: number;
  latency: LatencySummary;
  dbClockLatency: LatencySummary | null;
  /** creations/s over the ceiling's creations/s (DB shape only). */
  ceilingShare: number | null;
  /** Creations one at a time (--serial) after the throughput run: request to task.created. */
  serial: LatencySummary | null;
  /** The paced run at --rate (the latency target's run). */
  paced: PacedResult | null;
  /** When --rate is more than the fleet sustains: a paced run at half the measured throughput. */
  pacedSustainable: PacedResult | null;
  /** CPU ms per creation by consumer, over the throughput run (includes the tail: outbox delivery and launches). */
  cpu: CpuBreakdown | null;
  /** Server counters divided by creations (includes outbox delivery, launches and sweeps of the run). */
  perCreation: { commits: number; statements: number | null } | null;
  /** Deadlocks the server detected during the throughput run (the Store restarts each one). */
  deadlocks: number;
  /** Creations of this shape still unfinished after its runs (a step `unknown`/`failed` awaits the reaper or an operator). */
  stuck: string[];
  maxWorkerRssMb: number;
  apiRssMb: number;
  errors: string[];
}

export interface DialectResult {
  dialect: Dialect;
  url: string;
  serverVersion: string;
  workers: number;
  concurrency: number;
  launch: boolean;
  /** DB-shape creations the fresh fleet made before any shape, unmeasured (`--fleet-warmup`). */
  fleetWarmup: number;
  ceiling: CeilingResult | null;
  shapes: ShapeResult[];
  workerRssMb: number[];
  /** The peer runs just before and just after this dialect's measurement, and their mean workflows/s. */
  peer: { before: PeerRun; after: PeerRun; perSecond: number } | null;
  /** The bare `git worktree add -b` loop, measured before the fleet started. */
  gitBaseline: GitBaseline | null;
  /** 1-minute load average when the dialect's run started and ended (other work on the machine skews results). */
  loadAverage: { start: number; end: number };
  targets: TargetCheck[];
}

export interface BenchReport {
  startedAt: string;
  machine: { host: string; cpus: number; cpuModel: string; memoryGiB: number; node: string };
  options: Omit<BenchOptions, 'pgUrl' | 'mysqlUrl' | 'redisUrl'>;
  dialects: DialectResult[];
  /** The reference peer (DBOS Transact on the same PostgreSQL): every run, in order, and one at concurrency 1. */
  peer: { script: string | null; runs: PeerRun[]; serial: PeerRun | null; problem: string | null };
}
