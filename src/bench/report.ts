/**
 * The bench report as text: per dialect, the ceiling, one table row per
 * shape, the database-clock latencies, the per-creation server counters and
 * the targets (met / MISSED / not measured).
 */
import type { BenchReport, DialectResult } from './results';

const fmt = (n: number | null | undefined, digits = 1) =>
  n === null || n === undefined || !Number.isFinite(n) ? '-' : n.toFixed(digits);

function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) =>
    r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '),
  );
}

export const SHAPE_TABLE_HEADER = [
  'shape',
  'tasks',
  'creations/s',
  'p50 ms',
  'p95 ms',
  'p99 ms',
  '% of ceiling',
  'paced p99 ms at --rate',
  'max worker RSS MB',
];

export function renderDialect(r: DialectResult): string {
  const lines: string[] = [];
  lines.push(
    `${r.dialect}: ${r.serverVersion.split(' on ')[0]} · ${r.url} · ${r.workers} worker process(es) · concurrency ${r.concurrency} · launch ${r.launch ? 'on (agent `true`)' : 'off'} · fleet warmed up with ${r.fleetWarmup} db creations`,
  );
  lines.push(
    `  1-minute load average ${fmt(r.loadAverage.start, 2)} at the start, ${fmt(r.loadAverage.end, 2)} at the end` +
      (r.loadAverage.start > 1 ? ' (the machine was busy before the bench started: numbers are pessimistic)' : ''),
  );
  if (r.ceiling) {
    const c = r.ceiling;
    lines.push(
      `  ceiling (plain driver loop, ${c.statementsPerCreation} statements in 10 transactions per creation): ${fmt(c.creationsPerSecond)} creations/s, ${fmt(c.transactionsPerSecond, 0)} transactions/s, creation p50 ${fmt(c.latency.p50)} ms p99 ${fmt(c.latency.p99)} ms${c.retries > 0 ? `, ${c.retries} transactions retried after a deadlock` : ''}`,
    );
    if (c.cpu) {
      lines.push(
        `    CPU ms per creation: driver loop ${fmt(c.cpu.bench)}, database ${fmt(c.cpu.database)}, other ${fmt(c.cpu.other)} (machine ${fmt(c.cpu.machineBusy * 100, 0)}% busy)`,
      );
    }
  } else {
    lines.push('  ceiling: not measured (--no-ceiling)');
  }
  lines.push('');
  const rows = [SHAPE_TABLE_HEADER];
  for (const s of r.shapes) {
    rows.push([
      s.shape,
      `${s.ok}${s.failed > 0 ? ` (+${s.failed} failed)` : ''}`,
      fmt(s.creationsPerSecond),
      fmt(s.latency.p50),
      fmt(s.latency.p95),
      fmt(s.latency.p99),
      s.ceilingShare === null ? '-' : `${fmt(s.ceilingShare * 100)}%`,
      s.paced ? `${fmt(s.paced.latency.p99)}${s.paced.overloaded ? ' (overloaded)' : ''}` : '-',
      String(s.maxWorkerRssMb),
    ]);
  }
  lines.push(...table(rows).map((l) => `  ${l}`));
  lines.push('');
  for (const s of r.shapes) {
    const d = s.dbClockLatency;
    lines.push(`  ${s.shape}:`);
    if (s.serial && s.serial.count > 0) {
      lines.push(
        `    one at a time (${s.serial.count} creations): p50 ${fmt(s.serial.p50)} / p95 ${fmt(s.serial.p95)} / p99 ${fmt(s.serial.p99)} ms`,
      );
    }
    lines.push(
      `    request → task.created by the database clock: p50 ${fmt(d?.p50)} / p95 ${fmt(d?.p95)} / p99 ${fmt(d?.p99)} ms`,
    );
    for (const p of [s.paced, s.pacedSustainable]) {
      if (!p) continue;
      const why = p === s.pacedSustainable ? ' (half the measured throughput)' : '';
      lines.push(
        `    paced ${fmt(p.rate, p.rate % 1 === 0 ? 0 : 1)}/s for ${p.seconds} s${why}: ${p.ok} ok` +
          (p.failed > 0 ? `, ${p.failed} FAILED` : '') +
          (p.overloaded ? `, OVERLOADED (stopped after ${p.sent} of ${p.planned} requests)` : '') +
          ` at ${fmt(p.achievedPerSecond)}/s, p50 ${fmt(p.latency.p50)} / p95 ${fmt(p.latency.p95)} / p99 ${fmt(p.latency.p99)} ms (database clock p99 ${fmt(p.dbClockLatency?.p99)} ms)`,
      );
    }
    if (s.perCreation) {
      lines.push(
        `    per creation: ${fmt(s.perCreation.commits)} server commits` +
          (s.perCreation.statements === null ? '' : `, ${fmt(s.perCreation.statements, 0)} statements (server-wide)`) +
          `; ${s.deadlocks} deadlock${s.deadlocks === 1 ? '' : 's'} detected by the server (each restarts a transaction)`,
      );
    }
    if (s.cpu) {
      const c = s.cpu;
      lines.push(
        `    CPU ms per creation: API ${fmt(c.api)}, workers ${fmt(c.workers)}, their Git and agent subprocesses ${fmt(c.subprocesses)}, database ${fmt(c.database)}, Redis ${fmt(c.redis)}, bench ${fmt(c.bench)}, other ${fmt(c.other)} (machine ${fmt(c.machineBusy * 100, 0)}% busy)`,
        `      of which in the kernel: API ${fmt(c.kernel.api)}, workers ${fmt(c.kernel.workers)}, database ${fmt(c.kernel.database)}`,
      );
    }
    lines.push(`    API process RSS ${s.apiRssMb} MB`);
    for (const e of s.errors) lines.push(`    error: ${e}`);
    if (s.stuck.length > 0) {
      lines.push(`    STUCK: ${s.stuck.length} step(s) of unfinished creations (awaiting the reaper or an operator):`);
      for (const x of s.stuck.slice(0, 5)) lines.push(`      ${x}`);
    }
  }
  if (r.peer) {
    lines.push(
      `  peer (DBOS Transact, same PostgreSQL): ${fmt(r.peer.before.perSecond)} workflows/s just before, ${fmt(r.peer.after.perSecond)} just after; ratios use their mean ${fmt(r.peer.perSecond)}`,
    );
  }
  if (r.gitBaseline) {
    lines.push(
      `  git baseline: a bare \`git worktree add -b\` loop made ${r.gitBaseline.worktrees} worktrees in the Git shape's repository at ${fmt(r.gitBaseline.perSecond)}/s`,
    );
  }
  lines.push('');
  lines.push('  targets:');
  for (const t of r.targets) {
    lines.push(`    ${t.met === null ? 'n/a   ' : t.met ? 'met   ' : 'MISSED'}  ${t.name}: ${t.detail}`);
  }
  return lines.join('\n');
}

export function renderReport(report: BenchReport): string {
  const m = report.machine;
  const head = `taskledger bench · ${report.startedAt} · ${m.cpus} × ${m.cpuModel} · ${m.memoryGiB} GiB · node ${m.node} · scratch ${report.options.scratch}`;
  const p = report.peer;
  const peerLines: string[] = [];
  if (p.problem !== null) peerLines.push(`peer: ${p.problem}`);
  for (const r of p.runs) {
    peerLines.push(
      `peer ${r.at}: DBOS Transact, concurrency ${r.concurrency}, ${r.seconds} s: ${fmt(r.perSecond)} workflows/s, p50 ${fmt(r.p50Ms)} ms, p99 ${fmt(r.p99Ms)} ms, ${fmt(r.commitsPerWorkflow)} commits per workflow`,
    );
  }
  if (p.serial) {
    peerLines.push(
      `peer one at a time: p50 ${fmt(p.serial.p50Ms)} ms, p99 ${fmt(p.serial.p99Ms)} ms (${fmt(p.serial.perSecond)} workflows/s)`,
    );
  }
  return [head, ...peerLines, '', ...report.dialects.map(renderDialect).flatMap((d) => [d, ''])].join('\n');
}
