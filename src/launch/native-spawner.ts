/**
 * The native spawner helper (src/launch/spawner-native.c, built into dist/
 * beside the bundle by `npm run build`): the same contract as `HelperSpawner`
 * (src/launch/spawner.ts) from a C process that starts children with
 * posix_spawn, so no process start forks a Node heap — a Node helper's
 * `spawn` cost ~7 ms of machine CPU per process on a 2-core VM, the C
 * helper's ~1.8 ms (docs/adr/0027-native-spawner.md).
 *
 * Contract (as `HelperSpawner`):
 * - `spawn(req)` resolves `{pid}` once the OS started the agent; rejects with
 *   `SpawnRefused` when the OS refused it (proven not started: ENOENT,
 *   EACCES, a missing cwd, an unopenable log) and with `SpawnLost` when the
 *   helper died or could not be reached with the request possibly delivered.
 * - `run(cmd)` resolves with the command's outcome whatever its exit status;
 *   rejects with `SpawnLost` only when the helper died first.
 * - The helper starts on first use and again after it died; it keeps this
 *   process's event loop alive only while a request waits for its answer.
 *   `close()` ends its input: nothing new starts, agents run on, and it leaves
 *   once they exited.
 * Framing (both directions): a 4-byte little-endian length, then fields, each
 * a 4-byte little-endian length and its bytes; the fields of each message are
 * listed in the C file's header.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import {
  onHelperLoss,
  SpawnLost,
  SpawnRefused,
  type AgentSpawner,
  type RunRequest,
  type RunResult,
  type SpawnRequest,
} from './spawner';

interface Pending {
  /** The helper the request went to: its death loses only its own requests. */
  owner: ChildProcess;
  resolve(fields: Buffer[]): void;
  reject(err: Error): void;
}

/**
 * `bin` when it exists and runs here (`--check` answers "ok": a binary built for another machine, or
 * missing a library, does not), else null. Runs it once, synchronously: call it once per process.
 */
export function usableBinary(bin: string | undefined): string | null {
  if (!bin) return null;
  try {
    accessSync(bin, constants.X_OK);
    return execFileSync(bin, ['--check'], { encoding: 'utf8', timeout: 10_000, stdio: 'pipe' }).trim() === 'ok'
      ? bin
      : null;
  } catch {
    return null;
  }
}

function frame(fields: readonly (string | Buffer)[]): Buffer {
  const parts = fields.map((f) => (typeof f === 'string' ? Buffer.from(f, 'utf8') : f));
  const size = parts.reduce((n, p) => n + 4 + p.length, 0);
  const out = Buffer.allocUnsafe(4 + size);
  out.writeUInt32LE(size, 0);
  let at = 4;
  for (const p of parts) {
    out.writeUInt32LE(p.length, at);
    p.copy(out, at + 4);
    at += 4 + p.length;
  }
  return out;
}

function fieldsOf(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at + 4 <= body.length;) {
    const n = body.readUInt32LE(at);
    out.push(body.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
  return out;
}

/** This process's environment with `extra` over it, as KEY=VALUE strings (the helper passes exactly these). */
function environment(extra: Record<string, string>): string[] {
  const env: Record<string, string | undefined> = { ...process.env, ...extra };
  return Object.entries(env)
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${k}=${v}`);
}

const nullable = (b: Buffer | undefined): string | null => (b === undefined || b.length === 0 ? null : b.toString());

export class NativeSpawner implements AgentSpawner {
  private child: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();

  constructor(private readonly bin: string) {}

  private helper(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(this.bin, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    let inbox: Buffer = Buffer.alloc(0);
    child.stdout.on('data', (chunk: Buffer) => {
      inbox = this.receive(inbox.length === 0 ? chunk : Buffer.concat([inbox, chunk]));
    });
    onHelperLoss(child, 'the native spawner', this.pending, () => {
      if (this.child === child) this.child = null;
    });
    child.stdin.on('error', () => undefined); // Its exit reports the loss.
    child.unref();
    this.child = child;
    this.idle(child);
    return child;
  }

  /** The helper keeps this process alive only while a request waits for its answer. */
  private idle(child: ChildProcess): void {
    const out = child.stdout as unknown as { ref?(): void; unref?(): void } | null;
    const inp = child.stdin as unknown as { unref?(): void } | null;
    inp?.unref?.();
    if (this.pending.size === 0) out?.unref?.();
    else out?.ref?.();
  }

  /** Settles the requests whose replies `inbox` holds whole; returns what is left of it. */
  private receive(inbox: Buffer): Buffer {
    while (inbox.length >= 4) {
      const n = inbox.readUInt32LE(0);
      if (inbox.length < 4 + n) break;
      const fields = fieldsOf(inbox.subarray(4, 4 + n));
      inbox = inbox.subarray(4 + n);
      const id = fields[1]?.toString() ?? '';
      const p = this.pending.get(id);
      if (!p) continue;
      this.pending.delete(id);
      if (this.child) this.idle(this.child);
      p.resolve(fields);
    }
    return inbox;
  }

  private request(kind: 'S' | 'R', fields: readonly (string | Buffer)[]): Promise<Buffer[]> {
    const child = this.helper();
    const id = String(this.nextId++);
    return new Promise<Buffer[]>((resolve, reject) => {
      this.pending.set(id, { owner: child, resolve, reject });
      this.idle(child);
      child.stdin!.write(frame([kind, id, ...fields]), (err) => {
        // A helper whose input is closed is gone (its exit may not be seen yet): the next request starts another.
        if (err && this.child === child) this.child = null;
        if (err && this.pending.delete(id)) {
          this.idle(child);
          reject(new SpawnLost(`the native spawner could not be reached: ${err.message}`));
        }
      });
    });
  }

  async spawn(req: SpawnRequest): Promise<{ pid: number | null }> {
    const env = environment(req.env);
    const f = await this.request('S', [
      req.cmd,
      req.cwd,
      req.logPath,
      req.exitPath,
      String(req.args.length),
      ...req.args,
      String(env.length),
      ...env,
    ]);
    if (f[0]?.toString() === 'E') throw new SpawnRefused(f[3]?.toString() ?? 'refused', f[2]?.toString() ?? 'EIO');
    return { pid: Number(f[2]?.toString()) };
  }

  async run(cmd: RunRequest): Promise<RunResult> {
    const env = environment(cmd.env);
    const f = await this.request('R', [
      cmd.file,
      String(cmd.timeoutMs),
      String(cmd.maxBuffer),
      cmd.input === undefined ? '0' : '1',
      cmd.input ?? '',
      String(cmd.args.length),
      ...cmd.args,
      String(env.length),
      ...env,
    ]);
    const code = nullable(f[2]);
    const exitCode = code === null ? null : Number(code);
    const errorCode = nullable(f[3]);
    const signal = nullable(f[4]);
    const stderr = f[7]?.toString() ?? '';
    const failed = exitCode !== 0;
    const line = [cmd.file, ...cmd.args].join(' ');
    return {
      stdout: f[6]?.toString() ?? '',
      stderr,
      exitCode,
      errorCode,
      signal,
      killed: f[5]?.toString() === '1',
      // As execFile's error message: what failed, then what it said.
      message: !failed
        ? null
        : errorCode !== null && exitCode === null && signal === null
          ? `spawn ${cmd.file} ${errorCode}`
          : `Command failed: ${line}\n${stderr}`,
    };
  }

  /** The helper process's PID while it runs (operators and tests), else null. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  close(): void {
    this.child?.stdin?.end();
    this.child = null;
  }
}
