/**
 * Child processes of the bench: the API process and M worker processes, each
 * `node bin/taskledger.mjs start --roles ...` with the bench database, a
 * private queue prefix and a private data directory. A child is ready when it
 * logs `taskledger fleet started`. While they run, every child's resident set
 * (VmRSS from /proc/<pid>/status) is sampled and its maximum kept.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { NODE_ARGS } from '../../ecosystem.config.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../package-root';

/** The built CLI (dist/, `npm run build`): what an operator runs. */
const BIN = join(packageRoot(), 'bin', 'taskledger.mjs');

/** Why 60 s: a child loads every role's modules and connects to the database and Redis; on two busy cores that takes seconds, not minutes. */
const READY_TIMEOUT_MS = 60_000;
/** Why 10 s: a stopping worker finishes its in-flight jobs (short transactions) and closes its pools. */
const STOP_TIMEOUT_MS = 10_000;

export interface BenchChild {
  name: string;
  pid: number;
  /** Largest VmRSS seen, in KiB (0 when /proc is unavailable). */
  maxRssKb: number;
  /** Log lines at level error or above. */
  errors: number;
  /** The last lines of output, for diagnostics. */
  tail: string[];
  ready: Promise<void>;
  process: ChildProcess;
}

/** Resident set size of a process in KiB, or null when /proc cannot tell. */
export function rssKb(pid: number): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

function remember(child: BenchChild, line: string): void {
  child.tail.push(line.length > 500 ? `${line.slice(0, 500)}...` : line);
  if (child.tail.length > 30) child.tail.shift();
}

/**
 * Node flags for every child: the production fleet's (ecosystem.config.js), then
 * any extra, e.g. TASKLEDGER_BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" to profile the fleet.
 */
function childNodeArgs(env: NodeJS.ProcessEnv): string[] {
  const raw = env.TASKLEDGER_BENCH_NODE_ARGS?.trim();
  return [...NODE_ARGS, ...(raw ? raw.split(/\s+/) : [])];
}

/** Every child still running, so an interrupted bench can stop them (`stopAllChildren`). */
const live = new Set<BenchChild>();

export function spawnRoleProcess(name: string, roles: string[], env: NodeJS.ProcessEnv): BenchChild {
  const proc = spawn(process.execPath, [...childNodeArgs(env), BIN, 'start', '--roles', roles.join(',')], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const child: BenchChild = {
    name,
    pid: proc.pid ?? -1,
    maxRssKb: 0,
    errors: 0,
    tail: [],
    ready: Promise.resolve(),
    process: proc,
  };
  child.ready = new Promise<void>((resolve, reject) => {
    let buffered = '';
    let isReady = false;
    const timer = setTimeout(
      () => reject(new Error(`${name} did not start within ${READY_TIMEOUT_MS / 1000} s:\n${child.tail.join('\n')}`)),
      READY_TIMEOUT_MS,
    );
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (chunk: string) => {
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (!line.startsWith('{')) {
          remember(child, line);
          continue;
        }
        try {
          const rec = JSON.parse(line) as { level?: number; msg?: string };
          if ((rec.level ?? 0) >= 50) {
            child.errors++;
            remember(child, line);
          } else if ((rec.level ?? 0) >= 40) {
            remember(child, line);
          }
          if (!isReady && rec.msg === 'taskledger fleet started') {
            isReady = true;
            clearTimeout(timer);
            resolve();
          }
        } catch {
          remember(child, line);
        }
      }
    });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk: string) => {
      for (const line of chunk.split('\n')) if (line.trim() !== '') remember(child, line);
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (!isReady)
        reject(new Error(`${name} exited (${signal ?? code}) before it was ready:\n${child.tail.join('\n')}`));
    });
  });
  // A rejected readiness is reported by whoever awaits it; never as an unhandled rejection.
  child.ready.catch(() => undefined);
  live.add(child);
  proc.once('exit', () => live.delete(child));
  return child;
}

/** Samples the resident set of every child every `everyMs` until stopped. */
export function sampleRss(children: readonly BenchChild[], everyMs = 250): { stop(): void } {
  const tick = () => {
    for (const c of children) {
      const kb = rssKb(c.pid);
      if (kb !== null && kb > c.maxRssKb) c.maxRssKb = kb;
    }
  };
  tick();
  const timer = setInterval(tick, everyMs);
  return {
    stop() {
      clearInterval(timer);
      tick();
    },
  };
}

/** SIGTERM (graceful stop), then SIGKILL after STOP_TIMEOUT_MS. */
export async function stopChild(child: BenchChild): Promise<void> {
  const proc = child.process;
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
}

export function isRunning(child: BenchChild): boolean {
  return child.process.exitCode === null && child.process.signalCode === null;
}

/** Stops every child this process started and has not stopped yet (an interrupted bench). */
export async function stopAllChildren(): Promise<void> {
  await Promise.all([...live].map(stopChild));
}
