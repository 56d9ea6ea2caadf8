/**
 * `taskledger bench` end to end at toy size: a scratch database beside the
 * project's, one API and one worker process, both shapes, a paced run and the
 * ceiling. Asserts the report's structure and that every creation completed —
 * never a speed (a timed assertion would fail on a busy machine, not on a
 * regression). Both dialects.
 */
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dbConfigFromEnv } from '../../src/db/config';
import { createDataSource } from '../../src/db/data-source';
import { defaultScratch, parseBenchArgs, type BenchOptions } from '../../src/bench/options';
import { silentProgress } from '../../src/bench/progress';
import { renderReport, SHAPE_TABLE_HEADER } from '../../src/bench/report';
import { runBench } from '../../src/bench/run';
import { dropDatabase, siblingDatabaseUrl } from './scratch-db';

const config = dbConfigFromEnv();
const scratchUrl = siblingDatabaseUrl(config.url, '_bench');

afterAll(async () => {
  await dropDatabase(scratchUrl);
});

describe('taskledger bench', () => {
  it('parses its options and refuses nonsense', () => {
    const quick = parseBenchArgs(['--quick'], {}) as BenchOptions;
    expect(quick).toMatchObject({ dialects: ['postgres', 'mysql'], workers: 1, shapes: ['db', 'git'], quick: true });
    expect(parseBenchArgs(['--help'], {})).toEqual({ help: true });
    expect(() => parseBenchArgs(['--tasks', '0'], {})).toThrow(/--tasks/);
    expect(() => parseBenchArgs(['--shapes', 'db,frob'], {})).toThrow(/unknown shape "frob"/);
    expect(() => parseBenchArgs(['--dialect', 'oracle'], {})).toThrow(/--dialect/);
    // Scratch files: the flag, then the environment, then a RAM file system when there is one.
    expect(
      (parseBenchArgs(['--scratch', '/var/tmp/x'], { TASKLEDGER_BENCH_SCRATCH: '/y' }) as BenchOptions).scratch,
    ).toBe('/var/tmp/x');
    expect((parseBenchArgs([], { TASKLEDGER_BENCH_SCRATCH: '/y' }) as BenchOptions).scratch).toBe('/y');
    expect((parseBenchArgs([], {}) as BenchOptions).scratch).toBe(defaultScratch());
    expect([tmpdir(), '/dev/shm']).toContain(defaultScratch());
    // The fleet warm-up: long enough for V8 to stop compiling (ADR 0048), a few creations in a smoke run.
    expect((parseBenchArgs([], {}) as BenchOptions).fleetWarmup).toBe(3000);
    expect(quick.fleetWarmup).toBe(5);
    expect((parseBenchArgs(['--fleet-warmup', '0'], {}) as BenchOptions).fleetWarmup).toBe(0);
  });

  it('runs both shapes, the paced run, the ceiling, the baselines and the peer, and reports every field', async () => {
    // A stand-in for the reference peer: the real one installs DBOS from npm and runs for seconds; this one
    // answers with the script's arguments in its figures, so the test sees which concurrency each run got.
    const dir = await mkdtemp(join(tmpdir(), 'taskledger-peer-'));
    const peerScript = join(dir, 'peer.sh');
    await writeFile(
      peerScript,
      'echo "installing..."; echo "{\\"concurrency\\":$1,\\"workflows\\":$((100*$2)),\\"wf_per_s\\":$((50+$1)),\\"p50_ms\\":$1,\\"p99_ms\\":9,\\"pg_commits_per_wf\\":31}"\n',
    );
    const options: BenchOptions = {
      ...(parseBenchArgs(['--quick', '--dialect', config.dialect], {}) as BenchOptions),
      tasks: 3,
      warmup: 1,
      fleetWarmup: 2,
      concurrency: 2,
      // One creation a second never overloads even a busy machine, so no second (sustainable) paced run.
      rate: 1,
      pacedSeconds: 2,
      serial: 2,
      gitBaseline: 2,
      peer: true,
      peerScript,
      peerSeconds: 1,
      pgUrl: scratchUrl,
      mysqlUrl: scratchUrl,
      redisUrl: process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379',
      scratch: await mkdtemp(join(tmpdir(), 'taskledger-bench-scratch-')),
    };
    const statuses: string[] = [];
    const report = await runBench(options, { ...silentProgress, status: (text) => statuses.push(text) });
    // The fleet's warm-up shows its progress, as the measured runs do.
    expect(statuses).toContainEqual(expect.stringMatching(/^\[\w+\] fleet warm-up \(unmeasured\) 2\/2 · /));
    // Every scratch file went under --scratch, and the run removed them again.
    expect(await readdir(options.scratch)).toEqual([]);
    await rm(options.scratch, { recursive: true });

    expect(report.dialects).toHaveLength(1);
    const d = report.dialects[0]!;
    expect(d.dialect).toBe(config.dialect);
    expect(d.ceiling?.creations).toBe(3);
    expect(d.ceiling?.creationsPerSecond).toBeGreaterThan(0);
    expect(d.shapes.map((s) => s.shape)).toEqual(['db', 'git']);
    for (const s of d.shapes) {
      expect(s).toMatchObject({ tasks: 3, ok: 3, failed: 0, errors: [], stuck: [] });
      for (const v of [s.creationsPerSecond, s.latency.p50, s.latency.p95, s.latency.p99, s.dbClockLatency?.p99]) {
        expect(Number.isFinite(v)).toBe(true);
      }
      expect(s.maxWorkerRssMb).toBeGreaterThan(0);
      // The kernel's part of each process class's CPU: a part of it, never more.
      const c = s.cpu!;
      for (const k of ['api', 'workers', 'database'] as const) {
        expect(c.kernel[k]).toBeGreaterThanOrEqual(0);
        expect(c.kernel[k]).toBeLessThanOrEqual(c[k]);
      }
    }
    const [db, git] = d.shapes;
    expect(db!.ceilingShare).toBeGreaterThan(0);
    expect(db!.paced).toMatchObject({ rate: 1, planned: 2, sent: 2, ok: 2, failed: 0, overloaded: false });
    expect(db!.pacedSustainable).toBeNull();
    expect(git!.paced).toBeNull();
    expect(d.workerRssMb).toHaveLength(1);
    expect(db!.serial?.count).toBe(2);
    expect(git!.serial).toBeNull();
    expect(d.gitBaseline).toMatchObject({ worktrees: 2, commandsPerWorktree: 1 });
    expect(d.gitBaseline!.perSecond).toBeGreaterThan(0);
    // One peer run at concurrency 1 (the serial goal), then one before and one after the dialect.
    expect(report.peer.problem).toBeNull();
    expect(report.peer.serial).toMatchObject({ concurrency: 1, perSecond: 51, p50Ms: 1 });
    expect(report.peer.runs.map((r) => r.perSecond)).toEqual([52, 52]);
    expect(d.peer).toMatchObject({ perSecond: 52 });
    expect(d.targets.map((t) => t.met === null)).toEqual([false, false, false, false, false, false, false]);
    expect(d.targets[0]!.detail).toContain('DBOS 52.0 workflows/s');
    await rm(dir, { recursive: true, force: true });

    // The ceiling's synthetic creations are retired before the fleet runs: none is left live for its reaper to launch.
    const ds = createDataSource({ ...config, url: scratchUrl }, { poolSize: 1 });
    await ds.initialize();
    try {
      const rows: { lifecycle_state: string; n: number | string }[] = await ds.query(
        "SELECT lifecycle_state, COUNT(*) AS n FROM tasks WHERE title = 'bench ceiling task' GROUP BY lifecycle_state",
      );
      expect(rows.map((r) => [r.lifecycle_state, Number(r.n) > 0])).toEqual([['deleted', true]]);
      // The fleet's warm-up: DB-shape creations of its own, all completed, before any shape ran.
      const warm: { creation_state: string; n: number | string }[] = await ds.query(
        "SELECT creation_state, COUNT(*) AS n FROM tasks WHERE title LIKE 'bench db fleet-warmup %' GROUP BY creation_state",
      );
      expect(warm.map((r) => [r.creation_state, Number(r.n)])).toEqual([['completed', 2]]);
    } finally {
      await ds.destroy();
    }

    const text = renderReport(report);
    expect(text).toContain(SHAPE_TABLE_HEADER.join('  ').slice(0, 5));
    expect(text).toContain(`scratch ${options.scratch}`);
    expect(d.fleetWarmup).toBe(2);
    expect(text).toContain('fleet warmed up with 2 db creations');
    for (const word of [
      'creations/s',
      'p99 ms',
      'ceiling',
      'targets:',
      'peer',
      'git baseline',
      'in the kernel',
      config.dialect,
    ])
      expect(text).toContain(word);
  }, 120_000);
});
