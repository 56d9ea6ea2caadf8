/**
 * The spawner contract (`AgentSpawner`, `RunRequest`/`RunResult`, `SpawnRefused`/`SpawnLost`) and its Node
 * implementations. Which one a process uses: src/launch/shared-spawner.ts (by default the C helper of
 * src/launch/native-spawner.ts, which keeps this contract; the Node helper below where none was built).
 *
 * `HelperSpawner` starts agent processes from a small Node helper process (src/launch/spawner-child.mjs)
 * instead of the worker itself. A worker's heap is 100+ MB; every `spawn`
 * from it forks (copies the page tables of) all of it, which cost a fifth of a
 * worker's CPU in the bench. The helper has no application code loaded, so a
 * fork from it is cheap, and the worker's event loop never forks.
 *
 * `AgentSpawner.spawn(req)` resolves `{pid}` once the OS started the agent,
 * rejects with `SpawnRefused` when the OS refused it (proven not started:
 * ENOENT, EACCES, ...) and with `SpawnLost` when the helper died or could not
 * be reached with the request possibly delivered (the agent may or may not
 * run: the caller treats it as ambiguous). The helper is started on first use
 * and again after it died; it does not keep the worker's event loop alive
 * while idle. `close()` disconnects it; agents it watches run on (it leaves
 * once they exited).
 *
 * `HelperSpawner.run(cmd)` runs a short command (Git, for the step effects)
 * from the same helper and resolves with its outcome, whatever its exit
 * status; it rejects with `SpawnLost` when the helper died first (the command
 * may or may not have run). `runInline` runs one in this process.
 *
 * `inlineSpawner` does the same in this process (no helper): for hosts where a
 * second process is not wanted, and the fallback when the helper cannot be
 * started at all.
 */
import { execFile, fork, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { writeExitRecord } from './start-marker';

export interface SpawnRequest {
  cmd: string;
  args: string[];
  cwd: string;
  /** Over the worker's own environment. */
  env: Record<string, string>;
  logPath: string;
  exitPath: string;
}

/** The OS refused to start the agent: proven not started. */
export class SpawnRefused extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
    this.name = 'SpawnRefused';
  }
}

/** The helper died or was unreachable after the request may have reached it: the agent may run. */
export class SpawnLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SpawnLost';
  }
}

/** A short command for the helper to run (`execFile`, no shell). */
export interface RunRequest {
  file: string;
  args: string[];
  /** Over the worker's own environment. */
  env: Record<string, string>;
  input?: string;
  timeoutMs: number;
  maxBuffer: number;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  /** 0 on success; null when it did not exit normally (a signal, a spawn error). */
  exitCode: number | null;
  /** A spawn error's code (ENOENT, ...), else null. */
  errorCode: string | null;
  signal: string | null;
  /** Its timeout killed it. */
  killed: boolean;
  message: string | null;
}

export interface AgentSpawner {
  spawn(req: SpawnRequest): Promise<{ pid: number | null }>;
  close(): void;
}

const CHILD = fileURLToPath(new URL('./spawner-child.mjs', import.meta.url));

type Reply =
  | { id: number; ok: true; pid: number; result?: undefined }
  | { id: number; ok: true; result: RunResult }
  | { id: number; ok: false; code: string; message: string };

interface Pending {
  /** The helper the request went to: its death loses only its own requests. */
  owner: ChildProcess;
  resolve(v: unknown): void;
  reject(err: Error): void;
}

/**
 * When a helper process exits or fails: `forget()` (the owner drops it), then every request still waiting on
 * *that* helper is rejected with `SpawnLost` (it may have run). Requests sent to a later helper are not its.
 */
export function onHelperLoss<K>(
  child: ChildProcess,
  what: string,
  pending: Map<K, { owner: ChildProcess; reject(err: Error): void }>,
  forget: () => void,
): void {
  const lost = (why: string) => {
    forget();
    for (const [id, p] of pending) {
      if (p.owner !== child) continue;
      pending.delete(id);
      p.reject(new SpawnLost(`${what} ${why}`));
    }
  };
  child.once('exit', (code, signal) => lost(`exited (${signal ?? code})`));
  child.once('error', (err) => lost(`failed: ${err.message}`));
}

export class HelperSpawner implements AgentSpawner {
  private child: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  private helper(): ChildProcess {
    if (this.child && this.child.connected) return this.child;
    // No loader hooks, no heap flags: the helper needs none of the worker's Node options.
    const child = fork(CHILD, [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', (m: Reply) => this.settle(m));
    onHelperLoss(child, 'the agent spawner', this.pending, () => {
      if (this.child === child) this.child = null;
    });
    child.unref();
    this.child = child;
    this.idle(child);
    return child;
  }

  /** The helper keeps this process alive only while a request waits for its answer. */
  private idle(child: ChildProcess): void {
    const channel = (child as unknown as { channel?: { ref(): void; unref(): void } }).channel;
    if (this.pending.size === 0) channel?.unref();
    else channel?.ref();
  }

  private settle(m: Reply): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (this.child) this.idle(this.child);
    if (!m.ok) p.reject(new SpawnRefused(m.message, m.code));
    else if (m.result !== undefined) p.resolve(m.result);
    else p.resolve({ pid: m.pid });
  }

  private request<T>(message: object): Promise<T> {
    const child = this.helper();
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { owner: child, resolve: resolve, reject });
      this.idle(child);
      child.send({ id, ...message }, (err) => {
        // A helper that cannot be reached is gone (its exit may not be seen yet): the next request starts another.
        if (err && this.child === child) this.child = null;
        if (err && this.pending.delete(id)) {
          this.idle(child);
          reject(new SpawnLost(`the agent spawner could not be reached: ${err.message}`));
        }
      });
    });
  }

  spawn(req: SpawnRequest): Promise<{ pid: number | null }> {
    return this.request<{ pid: number | null }>(req);
  }

  /** The helper process's PID while it runs (operators and tests), else null. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  run(cmd: RunRequest): Promise<RunResult> {
    return this.request<RunResult>({ run: cmd });
  }

  close(): void {
    if (this.child?.connected) this.child.disconnect();
    this.child = null;
  }
}

/** Spawns in this process (forks this process's heap): no helper. */
export const inlineSpawner: AgentSpawner = {
  async spawn(req) {
    const fd = openSync(req.logPath, 'a');
    try {
      const child = await new Promise<ChildProcess>((resolve, reject) => {
        const c = spawn(req.cmd, req.args, {
          cwd: req.cwd,
          env: { ...process.env, ...req.env },
          detached: true,
          stdio: ['ignore', fd, fd],
        });
        c.once('spawn', () => resolve(c));
        c.once('error', (err: NodeJS.ErrnoException) => reject(new SpawnRefused(err.message, err.code ?? 'EIO')));
      });
      const pid = child.pid ?? null;
      child.once('exit', (code, signal) => {
        try {
          writeExitRecord(req.exitPath, { pid, code, signal });
        } catch {
          // Best effort: recovery then needs a live process to prove the runtime.
        }
      });
      child.unref();
      return { pid };
    } finally {
      closeSync(fd);
    }
  },
  close() {},
};

/** Runs `cmd` in this process (forks this process's heap). */
export function runInline(cmd: RunRequest): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = execFile(
      cmd.file,
      cmd.args,
      { env: { ...process.env, ...cmd.env }, timeout: cmd.timeoutMs, maxBuffer: cmd.maxBuffer, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const e = err as (NodeJS.ErrnoException & { code?: unknown; killed?: boolean; signal?: string | null }) | null;
        resolve({
          stdout: String(stdout),
          stderr: String(stderr),
          exitCode: e ? (typeof e.code === 'number' ? e.code : null) : 0,
          errorCode: e && typeof e.code === 'string' ? e.code : null,
          signal: e?.signal ?? null,
          killed: e?.killed === true,
          message: e ? e.message : null,
        });
      },
    );
    // No input: stdin ends at once, so a command that reads it does not wait for its timeout.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(cmd.input);
  });
}
