#!/usr/bin/env node
/**
 * A/B of a lever: the DB shape's throughput run of a base commit and of this
 * checkout, alternated (base, this, base, this, ...) with a pause between, so
 * that the machine's drift falls on both sides alike. Prints each run, each
 * side's mean, and the CPU per creation of the database and the workers
 * normalised by the API process's (code a lever rarely touches), which moves
 * with the machine's speed and so cancels most of its noise.
 *
 * Usage: node scripts/ab-bench.mjs BASE_REF [--dialect postgres|mysql] [--shape db|git] [--pairs 3] [--tasks 600]
 *        [--fleet-warmup 3000] [--pause 10] [--keep]
 *
 * `--shape git` measures the Git shape instead, and also prints each run's
 * ratio to the bare `git worktree add -b` loop the bench runs beside it.
 *
 * BASE_REF is checked out into a worktree under the system's temp directory
 * (removed at the end unless --keep), shares this checkout's node_modules,
 * and is built there; this checkout is built first too. Uses `taskledger
 * bench --json` (docs/benchmarks.md has the bench's options and databases).
 * Nothing else should run on the machine meanwhile.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const VALUED = new Set(['--dialect', '--shape', '--pairs', '--tasks', '--fleet-warmup', '--pause']);
const base = args.find((a, i) => !a.startsWith('--') && !VALUED.has(args[i - 1]));
if (!base || args.includes('--help')) {
  console.error(
    'usage: node scripts/ab-bench.mjs BASE_REF [--dialect postgres|mysql] [--shape db|git] [--pairs 3] [--tasks 600] [--fleet-warmup 3000] [--pause 10] [--keep]',
  );
  process.exit(base ? 0 : 2);
}
const dialect = flag('--dialect', 'postgres');
const shapeName = flag('--shape', 'db');
const pairs = Number(flag('--pairs', '3'));
const tasks = Number(flag('--tasks', '600'));
const fleetWarmup = Number(flag('--fleet-warmup', '3000'));
const pauseS = Number(flag('--pause', '10'));
if (
  !['postgres', 'mysql'].includes(dialect) ||
  !['db', 'git'].includes(shapeName) ||
  !(pairs > 0) ||
  !(tasks > 0) ||
  !(fleetWarmup >= 0) ||
  !(pauseS >= 0)
) {
  console.error(
    'ab-bench: --dialect is postgres or mysql; --shape is db or git; --pairs, --tasks are positive, --pause is not negative',
  );
  process.exit(2);
}

const here = process.cwd();
const sha = execFileSync('git', ['rev-parse', '--verify', `${base}^{commit}`], { encoding: 'utf8' }).trim();
const tree = join(tmpdir(), `taskledger-ab-${sha.slice(0, 12)}`);

function run(cmd, cmdArgs, cwd) {
  const r = spawnSync(cmd, cmdArgs, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) throw new Error(`${cmd} ${cmdArgs.join(' ')} in ${cwd} failed:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

console.error(`ab-bench: building this checkout and ${base} (${sha.slice(0, 12)}) in ${tree}`);
run('npm', ['run', 'build'], here);
if (!existsSync(tree)) {
  run('git', ['worktree', 'add', '--detach', '-f', tree, sha], here);
  symlinkSync(join(here, 'node_modules'), join(tree, 'node_modules'));
}
run('npm', ['run', 'build'], tree);

// Both sides warm their fleet alike, with the same explicit count (their defaults differ across ADR 0048): a base
// from before `--fleet-warmup` (9eaa3af) has no fleet warm-up, so this checkout then runs without one too.
const helpOf = (cwd) => spawnSync('node', ['bin/taskledger.mjs', 'bench', '--help'], { cwd, encoding: 'utf8' });
const baseHelp = helpOf(tree);
const baseWarms = /--fleet-warmup/.test(`${baseHelp.stdout}${baseHelp.stderr}`);
const warmArgs = (label) =>
  baseWarms ? ['--fleet-warmup', String(fleetWarmup)] : label === 'this' ? ['--fleet-warmup', '0'] : [];
if (!baseWarms) console.error('ab-bench: the base has no --fleet-warmup; this checkout runs without one too');

/** One throughput run of the shape in `cwd`: creations/s, CPU ms per creation by process, and the Git loop's ratio. */
function bench(cwd, label, i) {
  const json = join(tmpdir(), `taskledger-ab-${process.pid}-${label}-${i}.json`);
  run(
    'node',
    [
      'bin/taskledger.mjs',
      'bench',
      '--dialect',
      dialect,
      '--shapes',
      shapeName,
      '--tasks',
      String(tasks),
      '--no-ceiling',
      '--no-peer',
      '--serial',
      '0',
      '--paced-seconds',
      '1',
      '--json',
      json,
      ...warmArgs(label),
    ],
    cwd,
  );
  const report = JSON.parse(readFileSync(json, 'utf8'));
  rmSync(json, { force: true });
  const shape = report.dialects[0].shapes.find((s) => s.shape === shapeName);
  const loop = report.dialects[0].gitBaseline?.perSecond;
  return { perSecond: shape.creationsPerSecond, cpu: shape.cpu, ratio: loop ? shape.creationsPerSecond / loop : null };
}

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const fmt = (n) => (n === null || n === undefined ? '-' : n.toFixed(1));
const runs = { base: [], this: [] };
try {
  for (let i = 1; i <= pairs; i++) {
    for (const [label, cwd] of [
      ['base', tree],
      ['this', here],
    ]) {
      const r = bench(cwd, label, i);
      runs[label].push(r);
      const c = r.cpu;
      console.log(
        `${label.padEnd(4)} ${dialect} ${shapeName} #${i}: ${fmt(r.perSecond)} creations/s${r.ratio === null ? '' : ` (${r.ratio.toFixed(2)}x the Git loop)`}; CPU ms per creation: API ${fmt(c?.api)}, workers ${fmt(c?.workers)}, database ${fmt(c?.database)}`,
      );
      await sleep(pauseS);
    }
  }
} finally {
  if (!args.includes('--keep')) {
    spawnSync('git', ['worktree', 'remove', '--force', tree], { cwd: here });
    spawnSync('git', ['worktree', 'prune'], { cwd: here });
  }
}

const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const side = (label) => {
  const rs = runs[label];
  const withCpu = rs.filter((r) => r.cpu && r.cpu.api > 0);
  return {
    perSecond: mean(rs.map((r) => r.perSecond)),
    ratio: rs.every((r) => r.ratio !== null) ? mean(rs.map((r) => r.ratio)) : null,
    database: withCpu.length ? mean(withCpu.map((r) => r.cpu.database / r.cpu.api)) : null,
    workers: withCpu.length ? mean(withCpu.map((r) => r.cpu.workers / r.cpu.api)) : null,
  };
};
const b = side('base');
const t = side('this');
const pct = (x, y) => (x === null || y === null ? '-' : `${(((y - x) / x) * 100).toFixed(1)} %`);
console.log(
  `\n${dialect} ${shapeName} shape, ${pairs} pair(s) of ${tasks} creations: base ${fmt(b.perSecond)}/s, this ${fmt(t.perSecond)}/s (${pct(b.perSecond, t.perSecond)})${b.ratio === null || t.ratio === null ? '' : `; to the Git loop ${b.ratio.toFixed(2)}x -> ${t.ratio.toFixed(2)}x`}`,
);
console.log(
  `CPU per creation over the API's: database ${b.database?.toFixed(2) ?? '-'} -> ${t.database?.toFixed(2) ?? '-'} (${pct(b.database, t.database)}), workers ${b.workers?.toFixed(2) ?? '-'} -> ${t.workers?.toFixed(2) ?? '-'} (${pct(b.workers, t.workers)})`,
);
