#!/usr/bin/env node
/**
 * Startup time of `taskledger start`: from spawning `node <launcher> start`
 * to its API answering GET /healthz with 200, then SIGTERM and wait for exit.
 * Launchers are measured in turn (A B A B ...), so a machine whose speed
 * drifts during the call moves both alike; the ratio to the first launcher is
 * taken pair by pair and its median reported. Also reports the CPU time the
 * process had used when it answered (Linux /proc; "-" elsewhere).
 *
 *   node scripts/startup-time.mjs [--runs N] [--roles api,steps,...] LAUNCHER...
 *
 * e.g. the tsx launcher of commit a70e342 against today's (dist/):
 *   git show a70e342:bin/taskledger.mjs > bin/taskledger-tsx.mjs   # not committed
 *   node scripts/startup-time.mjs --runs 15 bin/taskledger-tsx.mjs bin/taskledger.mjs
 *
 * Needs the services of `taskledger start` (TASKLEDGER_DB_URL migrated,
 * TASKLEDGER_REDIS_URL). Each run gets a free port and its own queue prefix.
 * Results: docs/deploy.md ("Startup time").
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  options: { runs: { type: 'string', default: '10' }, roles: { type: 'string' } },
  allowPositionals: true,
});
const runs = Number(values.runs);
if (positionals.length === 0 || !(runs > 0)) {
  console.error('usage: node scripts/startup-time.mjs [--runs N] [--roles R] LAUNCHER...');
  process.exit(2);
}
const TICK_MS = 1000 / 100; // USER_HZ

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function cpuMs(pid) {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS; // utime + stime
  } catch {
    return null;
  }
}

async function once(launcher, round) {
  const port = await freePort();
  const args = [launcher, 'start', ...(values.roles ? ['--roles', values.roles] : [])];
  const env = {
    ...process.env,
    TASKLEDGER_PORT: String(port),
    TASKLEDGER_QUEUE_PREFIX: `tl-startup-${process.pid}-${round}`,
    TASKLEDGER_LOG_LEVEL: 'warn',
  };
  const started = performance.now();
  const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  let dead = false;
  void exited.then(() => (dead = true));
  for (;;) {
    if (dead) throw new Error(`${launcher} exited before answering /healthz`);
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (performance.now() - started > 120_000) throw new Error(`${launcher} did not answer within 120 s`);
    await new Promise((r) => setTimeout(r, 5));
  }
  const ms = performance.now() - started;
  const cpu = cpuMs(child.pid);
  child.kill('SIGTERM');
  await exited;
  return { ms, cpu };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (x) => (x === null ? '-' : x.toFixed(0));

const results = positionals.map(() => []);
// One unmeasured warm-up each (file system cache, tsx's compile cache).
for (const l of positionals) await once(l, 'warmup');
for (let round = 0; round < runs; round++)
  for (const [i, l] of positionals.entries()) results[i].push(await once(l, round));

console.log(
  `taskledger start${values.roles ? ` --roles ${values.roles}` : ''}: spawn -> /healthz 200, ${runs} runs each, alternating`,
);
for (const [i, l] of positionals.entries()) {
  const ms = results[i].map((r) => r.ms);
  const cpu = results[i].map((r) => r.cpu).filter((c) => c !== null);
  const ratio =
    i === 0 ? '' : `   ratio to ${positionals[0]}: ${median(ms.map((m, k) => m / results[0][k].ms)).toFixed(2)}`;
  console.log(
    `${l}: wall ms min ${fmt(Math.min(...ms))} median ${fmt(median(ms))} max ${fmt(Math.max(...ms))}; ` +
      `cpu ms median ${cpu.length ? fmt(median(cpu)) : '-'}${ratio}`,
  );
}
