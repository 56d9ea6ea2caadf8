/**
 * Orchestrates one bench run per dialect:
 *
 * 1. drop, recreate and migrate the bench database; seed one workspace;
 * 2. the ceiling: the bare SQL of one creation in a plain driver loop
 *    (`ceiling.ts`), same database, same concurrency;
 * 3. start the API process and M worker processes (`processes.ts`);
 * 4. per shape: warm up, then N creations with C in flight (throughput and
 *    latency), then optionally a paced open-loop run at R creations/s;
 *    between runs, wait until the fleet is idle (outbox delivered, launches
 *    settled) so one run's tail does not load the next;
 * 5. stop the processes, remove the run's Redis keys and scratch files.
 *
 * Latency is request start to response with `wait_ms`, which answers when the
 * creation completed (task.created committed); the same latency by the
 * database clock (request start to `event_outbox.created_at`) is reported next
 * to it. Both clocks are the same host's wall clock.
 */
import { randomBytes } from 'node:crypto';
import { rm, mkdtemp } from 'node:fs/promises';
import { createServer } from 'node:net';
import { hostname, cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { deleteQueuePrefix } from '../runtime/redis';
import { redactUrl } from '../cli/redact';
import type { Dialect } from '../db/config';
import { readRows, type Db } from '../db/tx';
import { measureCeiling, CEILING_TRANSACTIONS, type CeilingResult } from './ceiling';
import { cpuPerCreation, trackCpu } from './cpu';
import {
  freshBenchDb,
  seedBenchWorld,
  serverCounters,
  serverVersion,
  taskCreatedTimes,
  type BenchWorld,
  type ServerCounters,
} from './database';
import { apiClient, closedLoop, pacedLoop, type ApiClient, type Sample } from './load';
import type { BenchOptions, Shape } from './options';
import { isRunning, sampleRss, spawnRoleProcess, stopChild, type BenchChild } from './processes';
import type { ProgressSink } from './progress';
import { summarize, type LatencySummary } from './stats';
import type { BenchReport, DialectResult, PacedResult, ShapeResult } from './results';
import { checkTargets } from './targets';
import { measureGitBaseline } from './git-baseline';
import { findPeerScript, runPeer, type PeerRun } from './peer';

const WORKER_ROLES = ['steps', 'complete', 'outbox', 'reaper'];

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = addr && typeof addr === 'object' ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function bodyFor(shape: Shape, w: BenchWorld, label: string) {
  return (i: number) => ({
    workspace_id: w.workspaceId,
    title: `bench ${shape} ${label} ${i}`,
    start_agent: true,
    agent_profile_id: w.agentProfileId,
    workspace_policy: { mode: 'shared_group', group_id: w.groupId },
    ...(shape === 'git' ? { repositories: [{ repository_id: w.repositoryId, fresh_branch: true }] } : {}),
  });
}

/**
 * The fresh fleet's one warm-up, before any shape (`--fleet-warmup`): DB-shape creations at the run's concurrency,
 * unmeasured, then idle. Each Node process compiles its hot code (V8's optimizing compiler, on its own threads)
 * and re-compiles what it de-optimized over the fleet's first ~3,000 creations (`--trace-opt`, ADR 0048): a
 * 500-creation run after a 600-creation warm-up billed ~2.4 ms more worker CPU and ~0.9 ms more API CPU per creation
 * than after 3,000. The peer is at its steady state within its 20 s window (20 and 60 s runs give the same rate).
 */
async function warmFleet(
  client: ApiClient,
  db: Db,
  world: BenchWorld,
  options: BenchOptions,
  died: Promise<never>,
  progress: ProgressSink,
  label: string,
) {
  const n = options.fleetWarmup;
  const started = Date.now();
  let lastStatus = 0;
  const warm = await Promise.race([
    closedLoop(client, n, Math.min(options.concurrency, n), bodyFor('db', world, 'fleet-warmup'), (done, samples) => {
      const now = Date.now();
      if (now - lastStatus < 200 && done < n) return;
      lastStatus = now;
      progress.status(statusLine(`${label} fleet warm-up (unmeasured)`, done, n, samples, now - started), done === n);
    }),
    died,
  ]);
  const bad = warm.samples.find((s) => !s.ok);
  if (bad) throw new Error(`fleet warm-up creation failed: ${bad.error}`);
  await Promise.race([waitIdle(db, world.workspaceId, options.launch), died]);
}

const mb = (kb: number) => Math.round(kb / 1024);
const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : '-');

async function dbClockLatency(db: Db, samples: readonly Sample[]): Promise<LatencySummary | null> {
  const ok = samples.filter((s) => s.ok && s.taskId !== null);
  if (ok.length === 0) return null;
  const times = await taskCreatedTimes(
    db,
    ok.map((s) => s.taskId!),
  );
  const lat = ok.flatMap((s) => {
    const t = times.get(s.taskId!);
    return t === undefined ? [] : [t - s.startEpochMs];
  });
  return lat.length === 0 ? null : summarize(lat);
}

/**
 * Waits until every creation of the workspace ended, every event is delivered
 * and every launch settled, so one run's tail does not load the next. A
 * creation with an `unknown` or `failed` step waits for the reaper or an
 * operator, not for the fleet: it is left out here and reported as stuck.
 * Unlaunched tasks are counted as completed tasks less tasks with a settled
 * claim, two counts rather than an anti-join: the poll runs inside the measured
 * window, and on fresh tables PostgreSQL planned the anti-join as a nested scan
 * (1.4 s per poll at 3,000 tasks, billed to the database's CPU per creation).
 */
async function waitIdle(db: Db, workspaceId: string, launch: boolean, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [busy] = await readRows<{ ops: string | number; outbox: string | number; launches: string | number }>(
      db,
      `SELECT
         (SELECT COUNT(*) FROM task_creation_operations o WHERE o.workspace_id = ? AND o.state IN ('preparing', 'completing')
             AND NOT EXISTS (SELECT 1 FROM task_creation_steps s WHERE s.operation_id = o.id AND s.state IN ('unknown', 'failed'))) AS ops,
         (SELECT COUNT(*) FROM event_outbox WHERE workspace_id = ? AND delivered_at IS NULL) AS outbox,
         ${
           launch
             ? `(SELECT COUNT(*) FROM tasks t WHERE t.workspace_id = ? AND t.creation_state = 'completed')
                - (SELECT COUNT(DISTINCT c.task_id) FROM task_launch_dispatch_claims c
                    WHERE c.workspace_id = ? AND c.state IN ('succeeded', 'cancelled', 'transferred'))`
             : '0'
         } AS launches`,
      launch ? [workspaceId, workspaceId, workspaceId, workspaceId] : [workspaceId, workspaceId],
    );
    if (busy && Number(busy.ops) === 0 && Number(busy.outbox) === 0 && Number(busy.launches) === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `the fleet did not go idle within ${timeoutMs / 1000} s (operations ${busy?.ops}, undelivered events ${busy?.outbox}, unlaunched tasks ${busy?.launches})`,
      );
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Creations of one shape left unfinished, each with the error of its stuck step. */
async function stuckCreations(db: Db, workspaceId: string, shape: Shape): Promise<string[]> {
  const rows = await readRows<{ operation_id: string; kind: string; state: string; error_json: string | null }>(
    db,
    `SELECT o.id AS operation_id, s.kind, s.state, s.error_json
       FROM task_creation_operations o JOIN tasks t ON t.id = o.task_id
       JOIN task_creation_steps s ON s.operation_id = o.id AND s.state IN ('unknown', 'failed', 'retry_wait', 'running')
      WHERE o.workspace_id = ? AND o.state IN ('preparing', 'completing') AND t.title LIKE ?
      ORDER BY o.id, s.kind`,
    [workspaceId, `bench ${shape} %`],
  );
  return rows.map((r) => {
    let message = '';
    try {
      const parsed = r.error_json ? (JSON.parse(r.error_json) as { message?: unknown }) : {};
      message = typeof parsed.message === 'string' ? parsed.message : '';
    } catch {
      message = r.error_json ?? '';
    }
    return `operation ${r.operation_id}: ${r.kind} ${r.state}${message ? `: ${message.slice(0, 300)}` : ''}`;
  });
}

function statusLine(
  label: string,
  done: number,
  total: number,
  samples: readonly Sample[],
  elapsedMs: number,
  extra = '',
) {
  const recent = samples.slice(-200).map((s) => s.latencyMs);
  const s = summarize(recent);
  const failed = samples.filter((x) => !x.ok).length;
  return (
    `${label} ${done}/${total} · ${fmt(done / (elapsedMs / 1000))}/s · recent p50 ${fmt(s.p50)} ms p99 ${fmt(s.p99)} ms` +
    (failed > 0 ? ` · ${failed} failed` : '') +
    extra
  );
}

/** Rejects as soon as a child process exits while the bench still needs it. */
function watchChildren(children: readonly BenchChild[]): { died: Promise<never>; disarm(): void } {
  let armed = true;
  let fail: (err: Error) => void = () => undefined;
  const died = new Promise<never>((_, reject) => {
    fail = reject;
  });
  died.catch(() => undefined);
  for (const c of children) {
    c.process.once('exit', (code, signal) => {
      if (armed) fail(new Error(`${c.name} exited (${signal ?? code}) during the run:\n${c.tail.join('\n')}`));
    });
  }
  return {
    died,
    disarm() {
      armed = false;
    },
  };
}

async function runShape(
  shape: Shape,
  ctx: {
    options: BenchOptions;
    dialect: Dialect;
    db: Db;
    world: BenchWorld;
    client: ApiClient;
    workers: BenchChild[];
    api: BenchChild;
    ceiling: CeilingResult | null;
    progress: ProgressSink;
    died: Promise<never>;
  },
): Promise<ShapeResult> {
  const { options, db, world, client, progress } = ctx;
  const label = `[${ctx.dialect} ${shape}]`;
  const race = <T>(p: Promise<T>) => Promise.race([p, ctx.died]);

  if (options.warmup > 0) {
    progress.status(`${label} warming up (${options.warmup} creations)`);
    const warm = await race(
      closedLoop(
        client,
        options.warmup,
        Math.min(options.concurrency, options.warmup),
        bodyFor(shape, world, 'warmup'),
      ),
    );
    const bad = warm.samples.find((s) => !s.ok);
    if (bad) throw new Error(`${label} warm-up creation failed: ${bad.error}`);
    await race(waitIdle(db, world.workspaceId, options.launch));
  }

  const before: ServerCounters = await serverCounters(db);
  const pids = { api: [ctx.api.pid], workers: ctx.workers.map((w) => w.pid) };
  const cpuTracker = trackCpu([...pids.api, ...pids.workers], { dialect: ctx.dialect });
  const started = Date.now();
  let lastStatus = 0;
  const run = await race(
    closedLoop(client, options.tasks, options.concurrency, bodyFor(shape, world, 'run'), (done, samples, inFlight) => {
      const now = Date.now();
      if (now - lastStatus < 200 && done < options.tasks) return;
      lastStatus = now;
      const rss = Math.max(0, ...ctx.workers.map((w) => w.maxRssKb));
      progress.status(
        statusLine(
          label,
          done,
          options.tasks,
          samples,
          now - started,
          ` · in flight ${inFlight} · worker RSS ≤ ${mb(rss)} MB`,
        ),
        done === options.tasks,
      );
    }),
  );
  await race(waitIdle(db, world.workspaceId, options.launch));
  const cpuAfter = cpuTracker.finish();
  // PostgreSQL backends publish their counters when idle (at most once a second).
  await new Promise((r) => setTimeout(r, 1500));
  const after = await serverCounters(db);
  const ok = run.samples.filter((s) => s.ok);
  const errors = [...new Set(run.samples.filter((s) => !s.ok).map((s) => s.error ?? 'unknown'))].slice(0, 5);
  const creationsPerSecond = ok.length / (run.wallMs / 1000);

  const runPaced = async (rate: number): Promise<PacedResult> => {
    const pacedStarted = Date.now();
    const total = Math.max(1, Math.round(rate * options.pacedSeconds));
    lastStatus = 0;
    const p = await race(
      pacedLoop(client, rate, options.pacedSeconds, bodyFor(shape, world, 'paced'), (done, samples, inFlight) => {
        const now = Date.now();
        if (now - lastStatus < 200 && done < total) return;
        lastStatus = now;
        progress.status(
          statusLine(
            `${label} paced ${fmt(rate)}/s:`,
            done,
            total,
            samples,
            now - pacedStarted,
            ` · in flight ${inFlight}`,
          ),
          done === total,
        );
      }),
    );
    progress.status(
      `${label} paced ${fmt(rate)}/s: ${p.samples.length}/${total}${p.overloaded ? ' (overloaded: stopped sending)' : ''}`,
      true,
    );
    await race(waitIdle(db, world.workspaceId, options.launch));
    const pOk = p.samples.filter((s) => s.ok);
    for (const s of p.samples) if (!s.ok && errors.length < 5) errors.push(s.error ?? 'unknown');
    return {
      rate,
      seconds: options.pacedSeconds,
      planned: p.planned,
      sent: p.sent,
      overloaded: p.overloaded,
      ok: pOk.length,
      failed: p.samples.length - pOk.length,
      achievedPerSecond: pOk.length / (p.wallMs / 1000),
      latency: summarize(pOk.map((s) => s.latencyMs)),
      dbClockLatency: await dbClockLatency(db, p.samples),
    };
  };
  let serial: LatencySummary | null = null;
  if (shape === 'db' && options.serial > 0) {
    const serialStarted = Date.now();
    lastStatus = 0;
    const sr = await race(
      closedLoop(client, options.serial, 1, bodyFor(shape, world, 'serial'), (done, samples) => {
        const now = Date.now();
        if (now - lastStatus < 200 && done < options.serial) return;
        lastStatus = now;
        progress.status(
          statusLine(`${label} one at a time:`, done, options.serial, samples, now - serialStarted),
          done === options.serial,
        );
      }),
    );
    await race(waitIdle(db, world.workspaceId, options.launch));
    for (const x of sr.samples) if (!x.ok && errors.length < 5) errors.push(x.error ?? 'unknown');
    serial = summarize(sr.samples.filter((x) => x.ok).map((x) => x.latencyMs));
  }
  let paced: PacedResult | null = null;
  let pacedSustainable: PacedResult | null = null;
  if (options.pacedShapes.includes(shape)) {
    paced = await runPaced(options.rate);
    const sustainable = Math.floor(creationsPerSecond / 2);
    if ((paced.overloaded || creationsPerSecond < options.rate) && sustainable >= 1 && sustainable < options.rate) {
      pacedSustainable = await runPaced(sustainable);
    }
  }

  return {
    shape,
    tasks: options.tasks,
    ok: ok.length,
    failed: run.samples.length - ok.length,
    wallMs: run.wallMs,
    creationsPerSecond,
    latency: summarize(ok.map((s) => s.latencyMs)),
    dbClockLatency: await dbClockLatency(db, run.samples),
    cpu: cpuPerCreation(cpuTracker.before, cpuAfter, pids, ok.length),
    serial,
    ceilingShare: shape === 'db' && ctx.ceiling ? creationsPerSecond / ctx.ceiling.creationsPerSecond : null,
    paced,
    pacedSustainable,
    deadlocks: after.deadlocks - before.deadlocks,
    stuck: await stuckCreations(db, world.workspaceId, shape),
    perCreation:
      ok.length === 0
        ? null
        : {
            commits: (after.commits - before.commits) / ok.length,
            statements:
              after.statements === null || before.statements === null
                ? null
                : (after.statements - before.statements) / ok.length,
          },
    maxWorkerRssMb: mb(Math.max(0, ...ctx.workers.map((w) => w.maxRssKb))),
    apiRssMb: mb(ctx.api.maxRssKb),
    errors,
  };
}

async function runDialect(dialect: Dialect, options: BenchOptions, progress: ProgressSink): Promise<DialectResult> {
  const url = dialect === 'postgres' ? options.pgUrl : options.mysqlUrl;
  const loadStart = loadavg()[0]!;
  progress.note(`[${dialect}] recreating and migrating ${redactUrl(url)} (load average ${loadStart.toFixed(2)})`);
  const bench = await freshBenchDb(url);
  const scratch: string[] = [];
  const prefix = `tl-bench-${randomBytes(4).toString('hex')}`;
  const children: BenchChild[] = [];
  let client: ApiClient | null = null;
  let watcher: { disarm(): void } | null = null;
  let sampler: { stop(): void } | null = null;
  try {
    const version = await serverVersion(bench.db);
    const world = await seedBenchWorld(bench.db, options.scratch);
    scratch.push(world.repoPath);
    // The ceiling writes into a workspace of its own, so the fleet's idle checks never see its rows.
    const ceilingWorld = options.ceiling ? await seedBenchWorld(bench.db, options.scratch) : null;
    if (ceilingWorld) scratch.push(ceilingWorld.repoPath);

    let ceiling: CeilingResult | null = null;
    if (ceilingWorld) {
      const started = Date.now();
      ceiling = await measureCeiling(
        dialect,
        url,
        ceilingWorld,
        options.tasks,
        options.concurrency,
        (done, elapsed) => {
          if (Date.now() - started > 0)
            progress.status(
              `[${dialect} ceiling] ${done}/${options.tasks} · ${fmt(done / (elapsed / 1000))} creations/s`,
              done === options.tasks,
            );
        },
      );
      progress.note(
        `[${dialect} ceiling] ${fmt(ceiling.creationsPerSecond)} creations/s (${fmt(ceiling.transactionsPerSecond, 0)} tx/s, ${CEILING_TRANSACTIONS} transactions and ${ceiling.statementsPerCreation} statements per creation)`,
      );
    }

    let gitBaseline = null;
    if (options.shapes.includes('git') && options.gitBaseline > 0) {
      progress.status(`[${dialect} git baseline] ${options.gitBaseline} × git worktree add -b`);
      gitBaseline = await measureGitBaseline(world.repoPath, options.gitBaseline, options.scratch);
      progress.note(
        `[${dialect} git baseline] bare git worktree add -b loop: ${fmt(gitBaseline.perSecond)} worktrees/s`,
      );
    }

    const dataDir = await mkdtemp(join(options.scratch, 'taskledger-bench-data-'));
    scratch.push(dataDir);
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TASKLEDGER_DB_URL: url,
      TASKLEDGER_REDIS_URL: options.redisUrl,
      TASKLEDGER_QUEUE_PREFIX: prefix,
      TASKLEDGER_DATA_DIR: dataDir,
      TASKLEDGER_PORT: String(port),
      TASKLEDGER_LOG_LEVEL: process.env.TASKLEDGER_LOG_LEVEL ?? 'info',
    };
    const workerRoles = options.launch ? [...WORKER_ROLES, 'launch'] : WORKER_ROLES;
    progress.note(
      `[${dialect}] starting the API process and ${options.workers} worker process(es): --roles ${workerRoles.join(',')}`,
    );
    const api = spawnRoleProcess('api', ['api'], env);
    children.push(api);
    const workers: BenchChild[] = [];
    for (let i = 0; i < options.workers; i++) {
      const w = spawnRoleProcess(`worker-${i + 1}`, workerRoles, env);
      workers.push(w);
      children.push(w);
    }
    await Promise.all(children.map((c) => c.ready));
    const watch = watchChildren(children);
    watcher = watch;
    sampler = sampleRss(children);
    client = apiClient(`http://127.0.0.1:${port}`, world.token, options.concurrency + 64);
    if (options.fleetWarmup > 0) {
      progress.status(`[${dialect}] warming up the fleet (${options.fleetWarmup} db creations, unmeasured)`);
      await warmFleet(client, bench.db, world, options, watch.died, progress, `[${dialect}]`);
    }

    const shapes: ShapeResult[] = [];
    for (const shape of options.shapes) {
      const r = await runShape(shape, {
        options,
        dialect,
        db: bench.db,
        world,
        client,
        workers,
        api,
        ceiling,
        progress,
        died: watch.died,
      });
      shapes.push(r);
      progress.note(
        `[${dialect} ${shape}] ${fmt(r.creationsPerSecond)} creations/s, p50 ${fmt(r.latency.p50)} ms, p99 ${fmt(r.latency.p99)} ms` +
          (r.paced
            ? `; paced ${r.paced.rate}/s p99 ${fmt(r.paced.latency.p99)} ms${r.paced.overloaded ? ' (overloaded)' : ''}`
            : '') +
          (r.pacedSustainable
            ? `; paced ${r.pacedSustainable.rate}/s p99 ${fmt(r.pacedSustainable.latency.p99)} ms`
            : '') +
          (r.failed > 0 ? `; ${r.failed} FAILED` : ''),
      );
    }
    sampler.stop();
    const result: DialectResult = {
      dialect,
      url: redactUrl(url),
      serverVersion: version,
      workers: options.workers,
      concurrency: options.concurrency,
      launch: options.launch,
      fleetWarmup: options.fleetWarmup,
      ceiling,
      shapes,
      peer: null,
      gitBaseline,
      workerRssMb: workers.map((w) => mb(w.maxRssKb)),
      loadAverage: { start: loadStart, end: loadavg()[0]! },
      targets: [],
    };
    return result;
  } finally {
    sampler?.stop();
    watcher?.disarm();
    client?.close();
    await Promise.all(children.filter(isRunning).map(stopChild));
    await bench.close();
    await deleteQueuePrefix(options.redisUrl, prefix).catch(() => undefined);
    for (const dir of scratch) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

export async function runBench(options: BenchOptions, progress: ProgressSink): Promise<BenchReport> {
  const { pgUrl: _pg, mysqlUrl: _my, redisUrl: _redis, ...shown } = options;
  const report: BenchReport = {
    startedAt: new Date().toISOString(),
    machine: {
      host: hostname(),
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
      node: process.version,
    },
    options: shown,
    dialects: [],
    peer: { script: null, runs: [], serial: null, problem: null },
  };
  const peer = report.peer;
  peer.script = options.peer ? findPeerScript(options.peerScript) : null;
  if (!options.peer) peer.problem = 'not run (--no-peer)';
  else if (peer.script === null)
    peer.problem = `no peer script (looked for ${options.peerScript ?? '$TASKLEDGER_BENCH_PEER or ../shared/peers/dbos/run.sh'})`;
  // One peer run before the first dialect and one after each: every dialect is bracketed by two.
  const peerRun = async (concurrency: number, seconds: number): Promise<PeerRun | null> => {
    if (peer.script === null || peer.problem !== null) return null;
    progress.status(`[peer] DBOS Transact, concurrency ${concurrency}, ${seconds} s (${peer.script})`);
    try {
      const r = await runPeer(peer.script, concurrency, seconds);
      progress.note(
        `[peer] DBOS Transact at concurrency ${concurrency}: ${fmt(r.perSecond)} workflows/s, p50 ${fmt(r.p50Ms)} ms, p99 ${fmt(r.p99Ms)} ms`,
      );
      return r;
    } catch (err) {
      peer.problem = (err as Error).message;
      progress.note(`[peer] ${peer.problem}`);
      return null;
    }
  };
  peer.serial = options.serial > 0 ? await peerRun(1, Math.min(options.peerSeconds, 10)) : null;
  let previous = await peerRun(options.concurrency, options.peerSeconds);
  if (previous) peer.runs.push(previous);
  for (const dialect of options.dialects) {
    const result = await runDialect(dialect, options, progress);
    const next = await peerRun(options.concurrency, options.peerSeconds);
    if (next) peer.runs.push(next);
    if (previous && next)
      result.peer = { before: previous, after: next, perSecond: (previous.perSecond + next.perSecond) / 2 };
    previous = next;
    result.targets = checkTargets(result, cpus().length, peer.serial);
    report.dialects.push(result);
  }
  progress.done();
  return report;
}
