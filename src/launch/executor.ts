/**
 * Executors start agent runtimes. The default local-process executor runs the
 * agent profile's command in the task's worktree, detached, with its output in
 * a log file. Before spawning it writes a start marker keyed by the dispatch
 * idempotency key; a second start for the same key finds the marker and
 * returns the recorded runtime instead of starting a second agent.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, openSync, closeSync, readFileSync, renameSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { canonicalJson } from '../canonical/canonical-json';

export interface StartRequest {
  idempotencyKey: string;
  sessionId: string;
  taskId: string;
  operationId: string;
  command: string[];
  cwd: string;
  env: Record<string, string>;
}

export interface StartedRuntime {
  pid: number | null;
  handle: Record<string, unknown>;
  startMarkerSha256: string;
  /** False when the marker proved an earlier start for the same idempotency key. */
  started: boolean;
}

export class ExecutorError extends Error {
  constructor(
    message: string,
    /** `no_dispatch`: proven not started (spawn refused); `ambiguous`: may be running. */
    readonly failureClass: 'no_dispatch' | 'ambiguous',
  ) {
    super(message);
    this.name = 'ExecutorError';
  }
}

export interface Executor {
  readonly kind: string;
  start(req: StartRequest): Promise<StartedRuntime>;
}

function writeAtomic(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

export class LocalProcessExecutor implements Executor {
  readonly kind = 'local';

  constructor(private readonly runtimeDir: string) {}

  markerPath(sessionId: string): string {
    return join(this.runtimeDir, `${sessionId}.json`);
  }

  async start(req: StartRequest): Promise<StartedRuntime> {
    mkdirSync(this.runtimeDir, { recursive: true });
    const marker = this.markerPath(req.sessionId);
    if (existsSync(marker)) {
      const doc = JSON.parse(readFileSync(marker, 'utf8')) as {
        idempotency_key: string;
        pid: number | null;
        state: string;
      };
      if (doc.idempotency_key !== req.idempotencyKey)
        throw new ExecutorError('start marker belongs to another dispatch', 'ambiguous');
      if (doc.state === 'starting') throw new ExecutorError('an earlier start may have spawned the agent', 'ambiguous');
      if (doc.state === 'started') {
        const text = readFileSync(marker, 'utf8');
        return {
          pid: doc.pid,
          handle: { kind: 'local', pid: doc.pid, marker },
          startMarkerSha256: sha(text),
          started: false,
        };
      }
      // `refused`: the OS never started it; starting again is safe.
    }
    const [cmd, ...args] = req.command;
    if (!cmd) throw new ExecutorError('agent profile has an empty command', 'no_dispatch');
    writeAtomic(
      marker,
      canonicalJson({ idempotency_key: req.idempotencyKey, session_id: req.sessionId, state: 'starting', pid: null }),
    );
    const logPath = join(this.runtimeDir, `${req.sessionId}.log`);
    const fd = openSync(logPath, 'a');
    const child = await new Promise<ReturnType<typeof spawn>>((resolve, reject) => {
      const c = spawn(cmd, args, {
        cwd: req.cwd,
        env: { ...process.env, ...req.env },
        detached: true,
        stdio: ['ignore', fd, fd],
      });
      c.once('spawn', () => resolve(c));
      c.once('error', reject);
    })
      .catch((err: Error) => {
        // The OS refused to start it (ENOENT, EACCES): proven not dispatched.
        writeAtomic(
          marker,
          canonicalJson({
            idempotency_key: req.idempotencyKey,
            session_id: req.sessionId,
            state: 'refused',
            pid: null,
          }),
        );
        throw new ExecutorError(`could not start ${cmd}: ${err.message}`, 'no_dispatch');
      })
      .finally(() => closeSync(fd));
    child.unref();
    const pid = child.pid ?? null;
    const text = canonicalJson({
      idempotency_key: req.idempotencyKey,
      session_id: req.sessionId,
      state: 'started',
      pid,
      log: logPath,
    });
    writeAtomic(marker, text);
    return { pid, handle: { kind: 'local', pid, marker, log: logPath }, startMarkerSha256: sha(text), started: true };
  }
}
