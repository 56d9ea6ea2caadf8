/**
 * The agent spawner helper (src/launch/spawner.ts): agents start from a small
 * helper process, never by forking the worker; the OS refusing a command is
 * proven (SpawnRefused, then the executor's `refused` marker and no-dispatch);
 * the helper dying with a start in flight is ambiguous (the marker stays
 * `starting`), and the next start gets a fresh helper; the agent's exit is
 * recorded by the helper. Runs in both dialect projects (no database).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExecutorError, LocalProcessExecutor } from '../../src/launch/executor';
import { readMarker } from '../../src/launch/start-marker';
import { HelperSpawner, SpawnLost, SpawnRefused } from '../../src/launch/spawner';

const dir = () => mkdtempSync(join(tmpdir(), 'taskledger-spawner-'));

async function waitFor<T>(what: string, probe: () => T | null, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const parentOf = (pid: number) =>
  Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);

describe('the agent spawner helper', () => {
  it('starts the agent from a helper process, with its env and cwd, and records its exit', async () => {
    const d = dir();
    const spawner = new HelperSpawner();
    try {
      const { pid } = await spawner.spawn({
        cmd: 'sh',
        args: ['-c', 'echo "$GREETING from $(pwd)"; echo "ppid $PPID"; exit 3'],
        cwd: d,
        env: { GREETING: 'hello' },
        logPath: join(d, 'agent.log'),
        exitPath: join(d, 'agent.exit'),
      });
      expect(pid).toBeGreaterThan(0);
      const exit = await waitFor('the exit record', () => {
        try {
          return JSON.parse(readFileSync(join(d, 'agent.exit'), 'utf8')) as Record<string, unknown>;
        } catch {
          return null;
        }
      });
      expect(exit).toEqual({ code: 3, pid, signal: null });
      const log = readFileSync(join(d, 'agent.log'), 'utf8');
      expect(log).toContain(`hello from ${d}`);
      // The agent's parent is the helper, not this (the worker's) process.
      const ppid = Number(/ppid (\d+)/.exec(log)?.[1]);
      expect(ppid).not.toBe(process.pid);
      expect(parentOf(ppid)).toBe(process.pid);
    } finally {
      spawner.close();
    }
  });

  it('a command the OS refuses is SpawnRefused; the executor records `refused` and proves no dispatch', async () => {
    const d = dir();
    const spawner = new HelperSpawner();
    try {
      await expect(
        spawner.spawn({
          cmd: '/nonexistent/agent',
          args: [],
          cwd: d,
          env: {},
          logPath: join(d, 'a.log'),
          exitPath: join(d, 'a.exit'),
        }),
      ).rejects.toMatchObject({ name: 'SpawnRefused', code: 'ENOENT' });
      const executor = new LocalProcessExecutor(join(d, 'runtime'), { spawner });
      const err = await executor
        .start({
          idempotencyKey: 'k1',
          generation: 1,
          sessionId: 's1',
          taskId: 't1',
          operationId: 'o1',
          command: ['/nonexistent/agent'],
          cwd: d,
          env: {},
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ExecutorError);
      expect((err as ExecutorError).failureClass).toBe('no_dispatch');
      expect(readMarker(executor.markerPath('s1'))?.doc.state).toBe('refused');
    } finally {
      spawner.close();
    }
  });

  it('a helper that dies with a start in flight: ambiguous (the marker stays starting); the next start gets a new helper', async () => {
    const d = dir();
    const spawner = new HelperSpawner();
    try {
      // Warm the helper, then find it and kill it while a start is in flight.
      await spawner.spawn({
        cmd: 'true',
        args: [],
        cwd: d,
        env: {},
        logPath: join(d, 'w.log'),
        exitPath: join(d, 'w.exit'),
      });
      const helperPid = helperPids()[0]!;
      const executor = new LocalProcessExecutor(join(d, 'runtime'), { spawner });
      const started = executor.start({
        idempotencyKey: 'k2',
        generation: 1,
        sessionId: 's2',
        taskId: 't2',
        operationId: 'o2',
        command: ['sleep', '0.2'],
        cwd: d,
        env: {},
      });
      process.kill(helperPid, 'SIGKILL');
      const outcome = await started.then(
        () => 'started',
        (e: unknown) => e,
      );
      if (outcome !== 'started') {
        expect(outcome).toBeInstanceOf(ExecutorError);
        expect((outcome as ExecutorError).failureClass).toBe('ambiguous');
        expect(readMarker(executor.markerPath('s2'))?.doc.state).toBe('starting');
      }
      // Either way, the next start works from a fresh helper.
      const { pid } = await spawner.spawn({
        cmd: 'true',
        args: [],
        cwd: d,
        env: {},
        logPath: join(d, 'n.log'),
        exitPath: join(d, 'n.exit'),
      });
      expect(pid).toBeGreaterThan(0);
      expect(helperPids()).not.toContain(helperPid);
    } finally {
      spawner.close();
    }
  });

  it('SpawnLost and SpawnRefused are distinct errors', () => {
    expect(new SpawnLost('x')).not.toBeInstanceOf(SpawnRefused);
  });
});

/** Helper processes that are children of this process. */
function helperPids(): number[] {
  const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((l) => l.includes('spawner-child.mjs'))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}
