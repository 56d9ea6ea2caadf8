#!/usr/bin/env node
/**
 * Summarises V8 `.cpuprofile` files (from `node --cpu-prof`): self time by
 * function and by source area (a package in node_modules, a folder of dist/,
 * Node internals, GC, idle), heaviest first.
 *
 * Usage: node scripts/cpu-profile.mjs FILE.cpuprofile... [--top N]
 * (with the bench: TASKLEDGER_BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof", then
 * `node scripts/cpu-profile.mjs /tmp/prof/*.cpuprofile`).
 */
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args[topAt + 1]) : 40;
const files = args.filter((a, i) => a !== '--top' && i !== topAt + 1);

function area(url, name) {
  if (name === '(garbage collector)') return '(gc)';
  if (name === '(idle)' || name === '(program)') return name;
  if (!url) return '(native)';
  const nm = url.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/);
  if (nm) return nm[1];
  if (url.startsWith('node:')) return url;
  const dist = url.match(/\/dist\/(.*)$/) ?? url.match(/\/src\/(.*)$/);
  if (dist) return dist[1].split('/').slice(0, -1).join('/') || dist[1];
  return url;
}

for (const file of files) {
  const p = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map();
  const dt = p.timeDeltas;
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (dt[i] ?? 0));
  let total = 0;
  const fn = new Map();
  const ar = new Map();
  for (const [id, us] of self) {
    const n = byId.get(id);
    const cf = n.callFrame;
    const name = cf.functionName || '(anonymous)';
    if (name === '(idle)') continue;
    total += us;
    const short = (cf.url || '').replace(/^.*\/(node_modules|dist|src)\//, '$1/');
    const key = `${name} ${short}:${cf.lineNumber + 1}`;
    fn.set(key, (fn.get(key) ?? 0) + us);
    const a = area(cf.url, name);
    ar.set(a, (ar.get(a) ?? 0) + us);
  }
  const pct = (us) => ((100 * us) / total).toFixed(1).padStart(5);
  console.log(`\n== ${file}: ${(total / 1e6).toFixed(2)} s busy`);
  console.log('-- by area');
  for (const [k, v] of [...ar].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${pct(v)}%  ${k}`);
  console.log('-- by function (self)');
  for (const [k, v] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(v)}%  ${k}`);
}
