/**
 * The bench's target checks on hand-made results: met / MISSED / not
 * measured, the CPU budget a missed share implies, and the paced target
 * called unreachable only when the requested rate is above the ceiling's.
 * (test/cli/bench.test.ts runs the whole bench; this pins the arithmetic.)
 */
import { describe, expect, it } from 'vitest';
import type { CeilingResult } from '../../src/bench/ceiling';
import type { CpuBreakdown } from '../../src/bench/cpu';
import type { DialectResult, PacedResult, ShapeResult } from '../../src/bench/results';
import type { PeerRun } from '../../src/bench/peer';
import { checkTargets } from '../../src/bench/targets';

const latency = (p99: number) => ({ count: 10, mean: p99 / 2, p50: p99 / 2, p95: p99, p99, max: p99 });

const cpu = (database: number): CpuBreakdown => ({
  api: 10,
  workers: 40,
  subprocesses: 2,
  database,
  redis: 2,
  bench: 3,
  other: 1,
  machineBusy: 0.95,
  kernel: { api: 1, workers: 3, database: database / 4 },
});

function paced(rate: number, p99: number): PacedResult {
  return {
    rate,
    seconds: 5,
    planned: rate * 5,
    sent: rate * 5,
    overloaded: false,
    ok: rate * 5,
    failed: 0,
    achievedPerSecond: rate,
    latency: latency(p99),
    dbClockLatency: null,
  };
}

function dbShape(creationsPerSecond: number, ceilingPerSecond: number, pacedRun: PacedResult | null): ShapeResult {
  return {
    shape: 'db',
    tasks: 100,
    ok: 100,
    failed: 0,
    wallMs: 1000,
    creationsPerSecond,
    latency: latency(100),
    dbClockLatency: null,
    serial: null,
    ceilingShare: creationsPerSecond / ceilingPerSecond,
    paced: pacedRun,
    pacedSustainable: null,
    cpu: cpu(38),
    perCreation: null,
    deadlocks: 0,
    stuck: [],
    maxWorkerRssMb: 150,
    apiRssMb: 150,
    errors: [],
  };
}

function result(shape: ShapeResult | null, ceilingPerSecond: number, workerRssMb: number[]): DialectResult {
  const ceiling: CeilingResult = {
    creations: 100,
    concurrency: 16,
    wallMs: 1000,
    creationsPerSecond: ceilingPerSecond,
    transactionsPerSecond: ceilingPerSecond * 10,
    statementsPerCreation: 101,
    latency: latency(300),
    retries: 0,
    cpu: null,
  };
  return {
    dialect: 'postgres',
    url: 'postgres://x',
    serverVersion: 'test',
    workers: 2,
    concurrency: 16,
    launch: true,
    fleetWarmup: 600,
    ceiling,
    shapes: shape ? [shape] : [],
    peer: null,
    gitBaseline: null,
    workerRssMb,
    loadAverage: { start: 0, end: 0 },
    targets: [],
  };
}

/** Issue 3's targets follow issue 14's four. */
const issue3 = (r: DialectResult, cores: number) => checkTargets(r, cores).slice(4);

const peerRun = (perSecond: number, p50Ms = 12): PeerRun => ({
  concurrency: 16,
  seconds: 20,
  workflows: perSecond * 20,
  perSecond,
  p50Ms,
  p99Ms: 40,
  commitsPerWorkflow: 31,
  at: '2026-12-04T00:00:00Z',
});

describe('bench targets', () => {
  it('issue 14: each ratio is against the figure measured in the same run', () => {
    const db = dbShape(60, 100, null);
    db.serial = { ...latency(40), p50: 22 };
    const git: ShapeResult = { ...dbShape(12, 100, null), shape: 'git', ceilingShare: null };
    const r = result(db, 100, [150]);
    r.shapes.push(git);
    r.peer = { before: peerRun(110), after: peerRun(130), perSecond: 120 };
    r.gitBaseline = { worktrees: 60, perSecond: 21, commandsPerWorktree: 1 };
    const [peer, serial, gitCheck, cpuCheck] = checkTargets(r, 2, peerRun(80, 11));
    expect(peer).toEqual({
      name: 'db shape ≥ 0.5× DBOS (goal 1×)',
      met: true,
      // The peer moved by 20 of its mean 120 workflows/s: the report names that, and the ratio against each run.
      detail:
        '0.50× (60.0 creations/s; DBOS 120.0 workflows/s, 110.0 before and 130.0 after; the peer moved 17 % between them: 0.55× against the run before alone, 0.46× against the one after)',
    });
    expect(serial).toEqual({
      name: "one at a time p50 ≤ 25 ms (goal DBOS's 11.0 ms in this run)",
      met: true,
      detail: "p50 22.0 ms, p99 40.0 ms over 10 creations, 2.00× DBOS's",
    });
    // 12 / 21 = 0.571: under 0.6.
    expect(gitCheck).toMatchObject({ met: false, detail: '0.57× (12.0 creations/s; the loop 21.0 worktrees/s)' });
    // The fleet: API 10 + workers 40 + subprocesses 2 + database 38 + Redis 2; the bench's own CPU is not the fleet's.
    expect(cpuCheck).toMatchObject({
      met: false,
      detail: expect.stringMatching(/^92\.0 ms: API 10\.0, workers 40\.0/),
    });

    r.peer = { before: peerRun(130), after: peerRun(130), perSecond: 130 };
    expect(checkTargets(r, 2)[0]).toMatchObject({
      met: false,
      detail: '0.46× (60.0 creations/s; DBOS 130.0 workflows/s, 130.0 before and 130.0 after)',
    });
    // Within a tenth of their mean, the peer's two runs are one figure: nothing more is said.
    r.peer = { before: peerRun(125), after: peerRun(135), perSecond: 130 };
    expect(checkTargets(r, 2)[0]!.detail).toBe(
      '0.46× (60.0 creations/s; DBOS 130.0 workflows/s, 125.0 before and 135.0 after)',
    );
  });

  it('a missed share states the CPU budget it implies and what the fleet spent', () => {
    const [share, pacedCheck, rss] = issue3(result(dbShape(15, 50, paced(100, 900)), 50, [150, 210]), 2);
    expect(share).toMatchObject({ name: 'db shape ≥ 60% of the ceiling', met: false });
    // 2 cores × 1000 ms / (0.6 × 50/s) = 66.7 ms; the fleet = 10 + 40 + 2 + 38 + 2 (`other` is not the fleet's).
    expect(share!.detail).toBe(
      "30.0% (15.0 of 50.0 creations/s); that rate leaves at most 66.7 ms of machine CPU per creation (2 cores fully busy), the fleet spent 92.0 ms, 38.0 of them in the database, and the bench's load generator 3.0 more",
    );
    expect(pacedCheck).toMatchObject({ name: 'paced p99 ≤ 60 ms at 100/s', met: false });
    expect(pacedCheck!.detail).toMatch(
      /^p99 900\.0 ms at 100\.0\/s achieved; unreachable on this machine: the ceiling loop, the bare SQL alone, sustains 50\.0\/s$/,
    );
    expect(rss).toMatchObject({ met: false, detail: 'max 210 MB (150, 210 MB)' });
  });

  it('a met share and a paced rate under the ceiling carry no excuse', () => {
    const [share, pacedCheck, rss] = issue3(result(dbShape(40, 50, paced(20, 45)), 50, [150, 160]), 2);
    expect(share).toEqual({
      name: 'db shape ≥ 60% of the ceiling',
      met: true,
      detail: '80.0% (40.0 of 50.0 creations/s)',
    });
    expect(pacedCheck).toEqual({
      name: 'paced p99 ≤ 60 ms at 20/s',
      met: true,
      detail: 'p99 45.0 ms at 20.0/s achieved',
    });
    expect(rss).toMatchObject({ met: true });

    const [, slow] = issue3(result(dbShape(40, 50, paced(20, 61)), 50, [150]), 2);
    expect(slow).toMatchObject({ met: false, detail: 'p99 61.0 ms at 20.0/s achieved' });
  });

  it('says not measured when the run had no DB shape or no workers', () => {
    const checks = checkTargets(result(null, 50, []), 2);
    expect(checks.map((c) => [c.met, c.detail])).toEqual([
      [null, 'peer not measured'],
      [null, 'not measured'],
      [null, 'not measured'],
      [null, 'not measured'],
      [null, 'not measured'],
      [null, 'not measured'],
      [null, 'not measured'],
    ]);
  });
});
