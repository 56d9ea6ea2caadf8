/**
 * The spawner helpers (src/launch/spawner.ts's Node helper, src/launch/native-spawner.ts's C helper), each
 * held to the same contract: agents start from the helper, never by forking the worker; the OS refusing a
 * command is proven (SpawnRefused, then the executor's `refused` marker and no-dispatch); the helper dying
 * with a start in flight is ambiguous (the marker stays `starting`), and the next start gets a fresh helper;
 * the agent's exit is recorded by the helper; short commands (Git) run with their output, exit status,
 * input, timeout and output bound. Runs in both dialect projects (no database).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { ExecutorError, LocalProcessExecutor } from '../../src/launch/executor';
import { NativeSpawner, usableBinary } from '../../src/launch/native-spawner';
import { readMarker } from '../../src/launch/start-marker';
import { HelperSpawner, SpawnLost, SpawnRefused, type RunRequest } from '../../src/launch/spawner';

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

const statusOf = (pid: number) => readFileSync(`/proc/${pid}/status`, 'utf8');
const parentOf = (pid: number) => Number(/^PPid:\s+(\d+)/m.exec(statusOf(pid))?.[1] ?? NaN);
const nameOf = (pid: number) => /^Name:\s+(\S+)/m.exec(statusOf(pid))?.[1] ?? '';

// Built by the global setup (npm run build); the test fails rather than skips when it is missing.
const NATIVE_BIN = process.env.TASKLEDGER_SPAWNER_BIN ?? '';

type Helper = HelperSpawner | NativeSpawner;
const helpers: { kind: string; make: () => Helper; marker: string }[] = [
  { kind: 'Node helper', make: () => new HelperSpawner(), marker: 'spawner-child.mjs' },
  { kind: 'native helper', make: () => new NativeSpawner(NATIVE_BIN), marker: 'spawner-native' },
];

const cmd = (file: string, args: string[], over: Partial<RunRequest> = {}): RunRequest => ({
  file,
  args,
  env: {},
  timeoutMs: 10_000,
  maxBuffer: 1024 * 1024,
  ...over,
});

describe.each(helpers)('the agent spawner: $kind', ({ make, marker }) => {
  it('is built', () => {
    if (marker === 'spawner-native') expect(existsSync(NATIVE_BIN)).toBe(true);
    expect(marker).not.toBe('');
  });

  it('starts the agent from a helper process, with its env and cwd, in its own session, and records its exit', async () => {
    const d = dir();
    const spawner = make();
    try {
      const { pid } = await spawner.spawn({
        cmd: 'sh',
        args: [
          '-c',
          'echo "$GREETING from $(pwd) in $HOME"; echo "ppid $PPID"; echo "sid $(cut -d" " -f6 /proc/$$/stat)"; read x; echo "stdin [$x]"; exit 3',
        ],
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
      expect(log).toContain(`hello from ${d} in ${process.env.HOME ?? ''}`);
      expect(log).toContain('stdin []');
      // Its own session (detached): its session ID is its own PID.
      expect(log).toContain(`sid ${pid}\n`);
      // The agent's parent is the helper, not this (the worker's) process.
      const ppid = Number(/ppid (\d+)/.exec(log)?.[1]);
      expect(ppid).not.toBe(process.pid);
      expect(parentOf(ppid)).toBe(process.pid);
      expect(helperPids(marker)).toContain(ppid);
    } finally {
      spawner.close();
    }
  });

  it('records a signal as the exit', async () => {
    const d = dir();
    const spawner = make();
    try {
      const { pid } = await spawner.spawn({
        cmd: 'sh',
        args: ['-c', 'kill -TERM $$'],
        cwd: d,
        env: {},
        logPath: join(d, 'agent.log'),
        exitPath: join(d, 'agent.exit'),
      });
      const exit = await waitFor('the exit record', () => {
        try {
          return JSON.parse(readFileSync(join(d, 'agent.exit'), 'utf8')) as Record<string, unknown>;
        } catch {
          return null;
        }
      });
      expect(exit).toEqual({ code: null, pid, signal: 'SIGTERM' });
    } finally {
      spawner.close();
    }
  });

  it('a command the OS refuses is SpawnRefused; the executor records `refused` and proves no dispatch', async () => {
    const d = dir();
    const spawner = make();
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
      // A missing working directory and an unopenable log are refusals too.
      await expect(
        spawner.spawn({
          cmd: 'true',
          args: [],
          cwd: join(d, 'missing'),
          env: {},
          logPath: join(d, 'b.log'),
          exitPath: join(d, 'b.exit'),
        }),
      ).rejects.toMatchObject({ name: 'SpawnRefused', code: 'ENOENT' });
      await expect(
        spawner.spawn({
          cmd: 'true',
          args: [],
          cwd: d,
          env: {},
          logPath: join(d, 'missing', 'c.log'),
          exitPath: join(d, 'c.exit'),
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
    const spawner = make();
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
      const helperPid = spawner.pid!;
      expect(helperPids(marker)).toContain(helperPid);
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
      // Either way, once the spawner has seen the helper die (its reply may have come first, so the death can be
      // seen after the outcome), the next start works from a fresh helper.
      await vi.waitFor(() => expect(spawner.pid).not.toBe(helperPid), { timeout: 5_000 });
      const { pid } = await spawner.spawn({
        cmd: 'true',
        args: [],
        cwd: d,
        env: {},
        logPath: join(d, 'n.log'),
        exitPath: join(d, 'n.exit'),
      });
      expect(pid).toBeGreaterThan(0);
      expect(helperPids(marker)).not.toContain(helperPid);
    } finally {
      spawner.close();
    }
  });

  it('a command in flight when the helper dies is SpawnLost', async () => {
    const spawner = make();
    try {
      await spawner.run(cmd('true', []));
      const helperPid = spawner.pid!;
      expect(helperPids(marker)).toContain(helperPid);
      const running = spawner.run(cmd('sleep', ['5']));
      await new Promise((r) => setTimeout(r, 100));
      process.kill(helperPid, 'SIGKILL');
      await expect(running).rejects.toBeInstanceOf(SpawnLost);
    } finally {
      spawner.close();
    }
  });

  it('runs a command: its output, exit status, environment and input', async () => {
    const spawner = make();
    try {
      const ok = await spawner.run(
        cmd('sh', ['-c', 'printf "out:%s:" "$WHO"; cat; printf "err" >&2'], { env: { WHO: 'me' }, input: 'in\nput' }),
      );
      expect(ok).toMatchObject({
        stdout: 'out:me:in\nput',
        stderr: 'err',
        exitCode: 0,
        errorCode: null,
        signal: null,
        killed: false,
        message: null,
      });
      const failed = await spawner.run(cmd('sh', ['-c', 'echo nope >&2; exit 7']));
      expect(failed).toMatchObject({ stdout: '', stderr: 'nope\n', exitCode: 7, errorCode: null, killed: false });
      expect(failed.message).toContain('Command failed: sh -c');
      // No input: stdin is at its end at once (a reader does not wait for its timeout).
      const empty = await spawner.run(cmd('sh', ['-c', 'cat; echo done']));
      expect(empty).toMatchObject({ stdout: 'done\n', exitCode: 0 });
      // Large output arrives whole; many commands at once each get their own.
      const big = await spawner.run(cmd('sh', ['-c', 'head -c 300000 /dev/zero | tr "\\0" x']));
      expect(big.stdout.length).toBe(300_000);
      const many = await Promise.all(
        Array.from({ length: 20 }, (_, i) => spawner.run(cmd('sh', ['-c', `echo ${i}; exit ${i % 3}`]))),
      );
      many.forEach((r, i) => expect([r.stdout, r.exitCode]).toEqual([`${i}\n`, i % 3]));
    } finally {
      spawner.close();
    }
  });

  it('a command that cannot start, runs past its timeout, or writes past its bound', async () => {
    const spawner = make();
    try {
      const missing = await spawner.run(cmd('/nonexistent/git', []));
      expect(missing).toMatchObject({ exitCode: null, errorCode: 'ENOENT', killed: false });
      expect(missing.message).toContain('ENOENT');
      const started = Date.now();
      const slow = await spawner.run(cmd('sleep', ['10'], { timeoutMs: 200 }));
      expect(slow).toMatchObject({ exitCode: null, signal: 'SIGKILL', killed: true });
      expect(Date.now() - started).toBeLessThan(9_000);
      const chatty = await spawner.run(cmd('sh', ['-c', 'head -c 100000 /dev/zero'], { maxBuffer: 1000 }));
      expect(chatty).toMatchObject({ exitCode: null, errorCode: 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER' });
    } finally {
      spawner.close();
    }
  });

  it('a closed helper that leaves later does not lose the requests of the helper after it', async () => {
    const d = dir();
    const spawner = make();
    try {
      await spawner.spawn({
        cmd: 'sleep',
        args: ['0.4'],
        cwd: d,
        env: {},
        logPath: join(d, 'a.log'),
        exitPath: join(d, 'a.exit'),
      });
      const first = spawner.pid!;
      spawner.close();
      // The next request starts a new helper; the first one leaves (its agent ended) while this one runs.
      const r = await spawner.run(cmd('sh', ['-c', 'sleep 1; echo late']));
      expect(spawner.pid).not.toBe(first);
      expect(existsSync(join(d, 'a.exit'))).toBe(true);
      expect(r).toMatchObject({ stdout: 'late\n', exitCode: 0 });
    } finally {
      spawner.close();
    }
  });

  it('SpawnLost and SpawnRefused are distinct errors', () => {
    expect(new SpawnLost('x')).not.toBeInstanceOf(SpawnRefused);
  });
});

describe('the native helper', () => {
  it('is used only where it runs: a missing file or one that does not answer its check is not', () => {
    const d = dir();
    const fake = join(d, 'spawner-native');
    writeFileSync(fake, '#!/bin/sh\necho no\n', { mode: 0o755 });
    expect(usableBinary(NATIVE_BIN)).toBe(NATIVE_BIN);
    expect(usableBinary(fake)).toBeNull();
    expect(usableBinary(join(d, 'missing'))).toBeNull();
    expect(usableBinary(undefined)).toBeNull();
  });

  it('is what starts processes by default here: Git and agents come from it, not from a Node process', async () => {
    const { sharedSpawner, runCommand } = await import('../../src/launch/shared-spawner');
    const d = dir();
    const r = await runCommand(cmd('sh', ['-c', 'echo $PPID']));
    const helper = Number(r.stdout.trim());
    expect(nameOf(helper)).toBe('spawner-native');
    expect(parentOf(helper)).toBe(process.pid);
    const { pid } = await sharedSpawner().spawn({
      cmd: 'sleep',
      args: ['0.5'],
      cwd: d,
      env: {},
      logPath: join(d, 'a.log'),
      exitPath: join(d, 'a.exit'),
    });
    expect(parentOf(pid!)).toBe(helper);
  });

  it('leaves once its input ended and the agents it watches exited', async () => {
    const d = dir();
    const spawner = new NativeSpawner(NATIVE_BIN);
    await spawner.spawn({
      cmd: 'sleep',
      args: ['0.5'],
      cwd: d,
      env: {},
      logPath: join(d, 'a.log'),
      exitPath: join(d, 'a.exit'),
    });
    const helper = spawner.pid!;
    expect(nameOf(helper)).toBe('spawner-native');
    spawner.close();
    await new Promise((r) => setTimeout(r, 150));
    expect(existsSync(`/proc/${helper}`) && nameOf(helper)).toBe('spawner-native');
    await waitFor('the helper to leave', () => (existsSync(join(d, 'a.exit')) ? true : null));
    await waitFor('the helper to leave', () =>
      !existsSync(`/proc/${helper}`) || statusOf(helper).includes('zombie') ? true : null,
    );
  });
});

/** Helper processes that are children of this process. */
function helperPids(marker: string): number[] {
  const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((l) => l.includes(marker))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}
