#!/usr/bin/env node
/**
 * Summarises V8 `.cpuprofile` files (from `node --cpu-prof`): self time by
 * function and by source area (a package in node_modules, a folder of dist/,
 * Node internals, GC, idle), heaviest first.
 *
 * Usage: node scripts/cpu-profile.mjs FILE.cpuprofile... [--top N] [--callers NAME]
 * (with the bench: TASKLEDGER_BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof", then
 * `node scripts/cpu-profile.mjs /tmp/prof/*.cpuprofile`). `--callers NAME` adds where the time of the
 * function NAME (self and below) comes from: its nearest callers in this project's code.
 *
 * Samples are wall-clock: a process the scheduler preempted inside a system call (a socket write that woke the
 * database, say) is charged to that call. Check a large native entry against the process's user and system time
 * (`/proc/<pid>/stat`) before believing it.
 */
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args[topAt + 1]) : 40;
const callersAt = args.indexOf('--callers');
const callersOf = callersAt >= 0 ? args[callersAt + 1] : null;
const files = args.filter(
  (a, i) =>
    a !== '--top' && a !== '--callers' && (topAt < 0 || i !== topAt + 1) && (callersAt < 0 || i !== callersAt + 1),
);

/** The time of `name` (self and below, outermost call only), by its three nearest callers in dist/ or src/. */
function callers(p, byId, self, name) {
  const parent = new Map();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const inclusive = new Map();
  for (const [id, us] of self) {
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) inclusive.set(cur, (inclusive.get(cur) ?? 0) + us);
  }
  const by = new Map();
  let total = 0;
  for (const n of p.nodes) {
    if (n.callFrame.functionName !== name) continue;
    let outer = true;
    for (let a = parent.get(n.id); a !== undefined; a = parent.get(a))
      if (byId.get(a).callFrame.functionName === name) outer = false;
    if (!outer) continue;
    const chain = [];
    for (let a = parent.get(n.id); a !== undefined && chain.length < 3; a = parent.get(a)) {
      const cf = byId.get(a).callFrame;
      if (/\/(dist|src)\//.test(cf.url) && cf.functionName) chain.push(cf.functionName);
    }
    const us = inclusive.get(n.id) ?? 0;
    total += us;
    const key = chain.join(' < ') || '(no caller of ours)';
    by.set(key, (by.get(key) ?? 0) + us);
  }
  return { total, by };
}

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
  if (callersOf) {
    const c = callers(p, byId, self, callersOf);
    console.log(`-- ${callersOf}: ${pct(c.total)}% in all, by caller`);
    for (const [k, v] of [...c.by].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(v)}%  ${k}`);
  }
}
