/**
 * pm2 process file: one process per role of the worker fleet, all from the
 * same `taskledger start --roles <role>` entry point, sharing one database and
 * one Redis. Every process runs the built JavaScript in dist/ through
 * bin/taskledger.mjs (`npm ci` builds it; after changing the sources, `npm run
 * build` before `pm2 reload`). Run `taskledger migrate` once before starting them.
 *
 *   npm ci && npx taskledger migrate --create && pm2 start ecosystem.config.js
 *
 * test/deploy/pm2.test.ts starts this file under a real pm2 on both dialects.
 *
 * This package is "type": "module", so this file is ESM. pm2 loads process
 * files with require(), which on Node >= 20.19 (this package's engines floor)
 * loads ES modules and returns their named exports: pm2 reads `apps` from
 * there, so `apps` must be a named export (pm2 ignores `default`).
 */

/** Passed through from the environment pm2 is started in; unset ones keep taskledger's defaults (README.md). */
const VARIABLES = [
  'TASKLEDGER_DB_URL',
  'TASKLEDGER_REDIS_URL',
  'TASKLEDGER_PORT',
  'TASKLEDGER_ADMIN_TOKEN',
  'TASKLEDGER_DATA_DIR',
  'TASKLEDGER_QUEUE_PREFIX',
  'TASKLEDGER_LEASE_MS',
  'TASKLEDGER_SWEEP_MS',
  'TASKLEDGER_LOG_LEVEL',
  'TASKLEDGER_SWEEP_WORKSPACE_ID',
  'TASKLEDGER_SPAWNER',
  'TASKLEDGER_SPAWNER_BIN',
  'TASKLEDGER_PG_PREPARE',
  'TASKLEDGER_MYSQL_PREPARE',
];
const env = Object.fromEntries(
  VARIABLES.filter((name) => process.env[name] !== undefined).map((name) => [name, process.env[name]]),
);

/**
 * Node flags of every fleet process (also what `npm run bench` gives its
 * worker processes). Why a 16 MiB semi-space: a worker's young objects are
 * one job's rows and documents, and with the 4 MiB nursery used before, young
 * garbage was collected (and the live part copied) four times as often; 16
 * MiB cut the workers' CPU per creation by a tenth and raised throughput by
 * ~8 % (docs/benchmarks.md, morning session) for ~25 MB more resident memory
 * per process; 32 MiB bought nothing more. Why a 128 MiB
 * old space: a worker's live heap stays well under 64 MiB at 16 creations in
 * flight (a bench run with a 64 MiB limit completed), but with the default
 * limit V8 lets garbage pile up to ~220 MB resident before it collects; at
 * 128 MiB it collects earlier, a worker stays near 160 MB, and throughput
 * does not change. A process that did outgrow it would exit, and its leases
 * would be recovered like any crash (docs/recovery.md).
 */
export const NODE_ARGS = ['--max-semi-space-size=16', '--max-old-space-size=128'];

/** `instances` > 1 only where work is parallel by design: step workers claim rows, so two never run one step. */
const ROLES = [
  { role: 'api' },
  { role: 'admission' },
  { role: 'steps', instances: 2 },
  { role: 'complete' },
  { role: 'outbox' },
  { role: 'launch' },
  { role: 'cleanup' },
  { role: 'reaper' },
];

export const apps = ROLES.map(({ role, instances = 1 }) => ({
  name: `taskledger-${role}`,
  // The launcher of dist/main.js (no TypeScript loader at run time).
  script: 'bin/taskledger.mjs',
  node_args: NODE_ARGS,
  args: `start --roles ${role}`,
  cwd: import.meta.dirname,
  instances,
  exec_mode: 'fork',
  // A crash loop should be visible, not hidden: back off between restarts.
  exp_backoff_restart_delay: 1000,
  // Workers finish or abandon their claim on SIGINT; leases cover the rest.
  kill_timeout: 10_000,
  env,
}));
