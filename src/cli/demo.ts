/**
 * `taskledger demo [--tasks N] [--port P] [--keep-running]`: everything in one
 * process on the configured services. In order, one line per stage:
 * 1. create the database if missing and apply pending migrations;
 * 2. check Redis and the API port, start a fake GitHub/GitLab server and the
 *    whole fleet (every role, the configured queue prefix);
 * 3. build a demo workspace through the setup writers (src/demo/setup.ts);
 * 4. send N ordinary creations plus the fault scenarios over REST with the
 *    member token (src/demo/scenarios.ts), showing progress;
 * 5. wait (at most 30 s) for pending creations, event delivery and launches,
 *    then print the summary (src/demo/summary.ts);
 * 6. unless --keep-running, the task lifecycle tour in a second workspace
 *    (src/demo/lifecycle.ts): the WIP gate queueing and promoting, a move, a
 *    deletion, and the workspace's deletion with what its cascade did.
 * Then it stops, or with --keep-running serves the API and dashboard until
 * Ctrl-C.
 *
 * Exit codes: 0 every ordinary creation completed and the invariants held;
 * 1 a service was unreachable, the port was taken, or the summary names what
 * failed; 2 bad options.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { destination, pino } from 'pino';
import { configFromEnv, type AppConfig } from '../app/config';
import { ensureDatabase } from '../db/admin';
import { runBatch, requestCount, CONCURRENCY } from '../demo/batch';
import { readSteps, waitForSettled } from '../demo/ledger';
import { lifecycleTour } from '../demo/lifecycle';
import { Progress } from '../demo/progress';
import { armFaults, planBatch, PR_MISSING, PR_TRANSIENT } from '../demo/scenarios';
import { AGENT_COMMAND, createDemoWorkspace } from '../demo/setup';
import { summarize } from '../demo/summary';
import { startFleet, type Fleet } from '../fleet/fleet';
import { ROLES } from '../fleet/roles';
import { startFakeProviderServer, type FakeProviderServer } from '../providers/fake-server';
import { migrateCommand } from './migrate';
import { redactUrl, scrubPassword } from './redact';
import { EXIT } from './usage';

const USAGE = `usage: taskledger demo [--tasks N] [--port P] [--keep-running]
  --tasks N        ordinary creations to send (default 12), besides the fault scenarios
  --port P         API port (default TASKLEDGER_PORT or 8080; 0 picks a free one)
  --keep-running   keep serving the API and dashboard after the summary, until Ctrl-C`;

const DEFAULT_TASKS = 12;
/** Why 500: the demo is a tour, not the benchmark (`taskledger bench`); every task leaves files under the data dir. */
const MAX_TASKS = 500;
/** Why 30 s: every ordinary creation ends in about a second, the transient fault in about three. */
const SETTLE_TIMEOUT_MS = 30_000;

interface DemoOptions {
  tasks: number;
  port: number | null;
  keepRunning: boolean;
}

function describe(err: unknown): string {
  if (err instanceof AggregateError && err.message === '' && err.errors.length > 0) return describe(err.errors[0]);
  if (err instanceof Error) return err.message || (err as { code?: string }).code || err.name;
  return String(err);
}

function parseOptions(args: string[]): DemoOptions | 'help' {
  const { values } = parseArgs({
    args,
    options: {
      tasks: { type: 'string' },
      port: { type: 'string' },
      'keep-running': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return 'help';
  const int = (name: string, raw: string | undefined, min: number, max: number): number | null => {
    if (raw === undefined) return null;
    const n = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || n < min || n > max)
      throw new Error(`--${name} must be an integer from ${min} to ${max}`);
    return n;
  };
  return {
    tasks: int('tasks', values.tasks, 1, MAX_TASKS) ?? DEFAULT_TASKS,
    port: int('port', values.port, 0, 65535),
    keepRunning: values['keep-running'] ?? false,
  };
}

/** Resolves when the port can be bound on 127.0.0.1 (then frees it again); rejects with the bind error. */
function probePort(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => server.close(() => resolve()));
  });
}

/** One PING with no retries: a demo on a machine without Redis should say so at once, not hang reconnecting. */
async function pingRedis(url: string): Promise<void> {
  const redis = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 3_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  let cause: unknown = null;
  redis.on('error', (err: unknown) => (cause ??= err));
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    // ioredis reports "Connection is closed"; the socket's own error says why.
    throw cause ?? err;
  } finally {
    redis.disconnect();
  }
}

function apiBaseOf(fleet: Fleet): string {
  const addr = fleet.api?.server.address();
  return addr && typeof addr === 'object' ? `http://127.0.0.1:${addr.port}/api/v1` : '';
}

export async function demoCommand(args: string[]): Promise<number> {
  let options: DemoOptions | 'help';
  try {
    options = parseOptions(args);
  } catch (err) {
    console.error(`taskledger demo: ${describe(err)}\n${USAGE}`);
    return EXIT.USAGE;
  }
  if (options === 'help') {
    console.log(USAGE);
    return EXIT.OK;
  }
  let config: AppConfig;
  try {
    config = configFromEnv();
  } catch (err) {
    console.error(`taskledger demo: ${describe(err)}`);
    return EXIT.FAILED;
  }
  if (options.port !== null) config = { ...config, port: options.port };
  const dbWhere = redactUrl(config.db.url);
  const fail = (what: string, err?: unknown): number => {
    const detail =
      err === undefined ? '' : `: ${scrubPassword(describe(err), config.db.url).replace(/\s*\n\s*/g, ' ')}`;
    console.error(`taskledger demo: ${what}${detail}`);
    return EXIT.FAILED;
  };

  // The port first: a taken port is the most common reason a second demo cannot start.
  if (config.port !== 0) {
    try {
      await probePort(config.port);
    } catch (err) {
      const inUse = (err as { code?: string }).code === 'EADDRINUSE';
      return fail(
        inUse
          ? `port ${config.port} on 127.0.0.1 is already in use (another taskledger or service?); pass --port <free port>, --port 0 for any free port, or set TASKLEDGER_PORT`
          : `cannot listen on 127.0.0.1:${config.port}`,
        inUse ? undefined : err,
      );
    }
  }

  console.log(`taskledger demo: ${config.db.dialect}, data under ${config.dataDir}`);
  try {
    await ensureDatabase(config.db.url);
  } catch (err) {
    return fail(`cannot create the database at ${dbWhere}`, err);
  }
  console.log(`database: ${dbWhere} (created if it was missing)`);
  // The migrate command itself: same connection handling, same lines, same error messages.
  if ((await migrateCommand([])) !== EXIT.OK) return fail('migrations failed (see above)');

  try {
    await pingRedis(config.redisUrl);
  } catch (err) {
    return fail(`cannot reach Redis at ${redactUrl(config.redisUrl)} (set TASKLEDGER_REDIS_URL)`, err);
  }
  console.log(`redis: ${redactUrl(config.redisUrl)}, queue prefix "${config.queuePrefix}"`);
  const provider = await startFakeProviderServer();
  console.log(
    `fake provider: ${provider.url} stands in for GitHub (${provider.githubBaseUrl}) and GitLab (${provider.gitlabBaseUrl}); nothing leaves this machine`,
  );
  const log = pino({ name: 'taskledger', level: process.env.TASKLEDGER_LOG_LEVEL ?? 'warn' }, destination(2));
  let fleet: Fleet;
  const sweepScope: SweepScope = { workspaceId: '00000000-0000-0000-0000-000000000000' };
  try {
    // The demo's reaper and cleanup sweeps see only the demo's own workspace (none until it exists): the
    // database may hold other work that this fleet must not resume, compensate or clean up.
    fleet = await startFleet({ config, roles: [...ROLES], log, sweepWorkspaceId: () => sweepScope.workspaceId });
  } catch (err) {
    await provider.close();
    // A fleet that failed half-way may hold connections it never handed back; do not hang on them.
    setTimeout(() => process.exit(EXIT.FAILED), 2_000).unref();
    return fail('the fleet did not start', err);
  }
  try {
    return await runDemo(config, options, fleet, provider, sweepScope);
  } finally {
    await fleet.stop();
    await provider.close();
  }
}

/** The workspace the demo fleet's sweeps may touch; the nil UUID, which matches no workspace, until the demo's exists. */
interface SweepScope {
  workspaceId: string;
}

async function runDemo(
  config: AppConfig,
  options: DemoOptions,
  fleet: Fleet,
  provider: FakeProviderServer,
  sweepScope: SweepScope,
): Promise<number> {
  const apiBase = apiBaseOf(fleet);
  console.log(`fleet: ${ROLES.join(', ')} in this process; API on ${apiBase}`);

  const n = options.tasks;
  const ws = await createDemoWorkspace({
    db: fleet.db,
    dataDir: config.dataDir,
    provider,
    adminTokenConfigured: config.adminToken !== null,
    pullRequests: [...Array.from({ length: n }, (_, i) => i + 1), PR_TRANSIENT],
    mergeRequests: Array.from({ length: n }, (_, i) => i + 1),
  });
  sweepScope.workspaceId = ws.id;
  console.log(
    `workspace: ${ws.name} (${ws.id}): Git repositories ${ws.app.name} and ${ws.service.name} under ${config.dataDir}/demo-repos, ` +
      `workflow todo/doing (WIP 1)/done, agent profile running ${JSON.stringify(AGENT_COMMAND.join(' '))}, GitHub and GitLab connections, group, shared environment, member token` +
      (ws.operatorToken ? ', operator token' : ''),
  );
  armFaults(provider);
  const plan = await planBatch(ws, n, randomUUID().slice(0, 8));
  const total = requestCount(plan);
  console.log(
    `tasks: ${plan.tasks.length + (plan.deferred ? 1 : 0)} creations, a webhook delivered ${plan.webhook.deliveries} times, ` +
      `PR #${PR_TRANSIENT} (provider 500) and #${PR_MISSING} (404), two invalid requests: ${total} requests, ${CONCURRENCY} at a time`,
  );
  const progress = new Progress(total);
  progress.start();
  let results;
  try {
    results = await runBatch({ baseUrl: apiBase.replace(/\/api\/v1$/, ''), token: ws.memberToken }, plan, progress);
  } finally {
    progress.stop();
  }

  console.log(`waiting for pending creations, event delivery and launches (at most ${SETTLE_TIMEOUT_MS / 1000} s)...`);
  const settled = await waitForSettled(fleet.db, ws.id, config.dataDir, SETTLE_TIMEOUT_MS);
  console.log(`  ${settled.timedOut ? 'gave up' : 'settled'} after ${(settled.waitedMs / 1000).toFixed(1)} s`);
  const faultOps = results.faults.map((r) => r.operationId).filter((id): id is string => id !== null);
  const summary = summarize({
    results,
    snapshot: settled.snapshot,
    faultSteps: await readSteps(fleet.db, faultOps, 'remote_contribution_associate'),
    workspace: { id: ws.id, name: ws.name },
    dialect: config.db.dialect,
    apiBase,
    memberToken: ws.memberToken,
    operatorToken: ws.operatorToken,
    timedOut: settled.timedOut,
    waitedMs: settled.waitedMs,
    keepRunning: options.keepRunning,
  });
  // The summary ends with its result; without --keep-running the lifecycle tour comes first, then one result.
  const resultAt = summary.lines.findIndex((l) => l.startsWith('result: '));
  const head = options.keepRunning || resultAt < 0 ? summary.lines : summary.lines.slice(0, resultAt);
  for (const line of head) console.log(line);
  const failures = [...summary.failures];
  if (!options.keepRunning) {
    // The second act deletes a workspace of its own; with --keep-running the first one stays to explore instead.
    try {
      const tour = await lifecycleTour({
        db: fleet.db,
        dataDir: config.dataDir,
        provider,
        apiBase,
        operatorToken: config.adminToken ?? ws.operatorToken,
        adminTokenConfigured: config.adminToken !== null,
        // The first workspace has settled: from here the fleet's sweeps serve the tour's.
        sweep: (id) => (sweepScope.workspaceId = id),
      });
      for (const line of tour.lines) console.log(line);
      failures.push(...tour.failures);
    } catch (err) {
      failures.push(`the task lifecycle tour failed: ${describe(err)}`);
    }
    const verdict = summary.lines[resultAt] ?? 'result: OK';
    console.log('');
    if (failures.length === 0) console.log(`${verdict}; the task lifecycle tour held`);
    else console.log(summary.failures.length > 0 ? verdict : 'result: FAILED (the task lifecycle tour)');
    for (const f of failures) console.log(`  - ${f}`);
  }

  if (options.keepRunning) {
    console.log('\nserving until Ctrl-C ...');
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    console.log('stopping');
  }
  return failures.length === 0 ? EXIT.OK : EXIT.FAILED;
}
