/**
 * Executors start agent runtimes and, for recovery, observe whether a
 * dispatch started one. The default local-process executor runs the agent
 * profile's command in the task's worktree, detached, with its output in a
 * log file and the dispatch idempotency key in its environment. The process
 * is started by a small helper process (src/launch/spawner.ts), never by
 * forking the worker itself.
 *
 * Start: before spawning it creates a start marker keyed by the session
 * (exclusively: a second concurrent start finds it), holding the idempotency
 * key and the claim generation. A second start for the same key finds a
 * `started` marker and returns the recorded runtime instead of starting a
 * second agent; a marker written by a later claim generation makes the
 * earlier start stale (it does nothing).
 *
 * Observe (the recovery proof): runtime proof = a `started` marker for this
 * key (written only after a successful spawn; the agent is alive when a
 * process carries the key, else it exited, with or without a recorded exit),
 * or a `starting` marker with a live process carrying the key.
 * No-dispatch proof = no marker (or a `refused` one) for this key AND no
 * process carrying the key, on the host of the claim's last owner (markers
 * and processes are local: absence on another host proves nothing). Anything
 * else is no proof either way.
 *
 * Stop (a deleted task's agent): fence the marker, stop every process
 * carrying the key, prove none is left (src/launch/stop-agent.ts). The
 * runtime handle names the host, so only that host's cleanup worker acts.
 */
import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { NoDispatchProof } from '../store/launch-dispatch-recovery';
import { DISPATCH_KEY_ENV, findDispatchProcesses } from './dispatch-processes';
import { sharedSpawner } from './shared-spawner';
import { SpawnRefused, type AgentSpawner } from './spawner';
import { stopDispatchedAgent, type StopRef, type StopResult } from './stop-agent';
import {
  createMarkerExclusive,
  markerSha256,
  readExitRecord,
  readMarker,
  replaceMarker,
  retireMarker,
  type ExitRecord,
  type StartMarker,
} from './start-marker';

export interface StartRequest {
  idempotencyKey: string;
  /** The dispatch claim generation doing this start. */
  generation: number;
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

/** Which dispatch to observe: its idempotency key, session and current claim generation. */
export interface DispatchRef {
  idempotencyKey: string;
  sessionId: string;
  generation: number;
  /** The worker ID that last held the claim (`<host>:...`), when the ledger recorded it. */
  lastOwner?: string | null;
}

/** The host part of a launch worker ID (`<host>:<pid>:<suffix>`, see src/fleet/fleet.ts), or null. */
export function ownerHost(owner: string): string | null {
  const at = owner.indexOf(':');
  return at > 0 ? owner.slice(0, at) : null;
}

export interface ObservedRuntime {
  idempotencyKey: string;
  pid: number | null;
  handle: Record<string, unknown>;
  startMarkerSha256: string;
  /** A process carrying the dispatch key is alive now. */
  alive: boolean;
  exit: ExitRecord | null;
}

/** Authenticated no-dispatch proof, the same document the Store checks and records. */
export type NoDispatchEvidence = NoDispatchProof;

export type DispatchObservation =
  | { proof: 'runtime'; runtime: ObservedRuntime }
  | { proof: 'no_dispatch'; evidence: NoDispatchEvidence }
  | { proof: null; reason: string };

export class ExecutorError extends Error {
  constructor(
    message: string,
    /**
     * `no_dispatch`: proven not started (spawn refused); `ambiguous`: may be
     * running; `stale`: a later claim generation owns the dispatch, nothing
     * was done.
     */
    readonly failureClass: 'no_dispatch' | 'ambiguous' | 'stale',
  ) {
    super(message);
    this.name = 'ExecutorError';
  }
}

export interface Executor {
  readonly kind: string;
  /** The host whose runtimes this executor can see (`ownerHost` of the workers that start them). */
  readonly host: string;
  start(req: StartRequest): Promise<StartedRuntime>;
  /** Reads only; never starts or stops anything. */
  observe(ref: DispatchRef): Promise<DispatchObservation>;
  /** Fences the dispatch against a later start, stops its agent and proves it stopped (src/launch/stop-agent.ts). */
  stop(ref: StopRef): Promise<StopResult>;
}

export class LocalProcessExecutor implements Executor {
  readonly kind = 'local';

  /** This host as launch workers name it in their worker IDs (default: the OS hostname). */
  readonly host: string;

  /** Starts the agent processes (default: the process-wide helper, src/launch/spawner.ts). */
  private readonly spawner: AgentSpawner;

  constructor(
    private readonly runtimeDir: string,
    options: { host?: string; spawner?: AgentSpawner } = {},
  ) {
    this.host = options.host ?? hostname();
    this.spawner = options.spawner ?? sharedSpawner();
  }

  markerPath(sessionId: string): string {
    return join(this.runtimeDir, `${sessionId}.json`);
  }

  exitPath(sessionId: string): string {
    return join(this.runtimeDir, `${sessionId}.exit.json`);
  }

  private logPath(sessionId: string): string {
    return join(this.runtimeDir, `${sessionId}.log`);
  }

  private handle(marker: StartMarker, pid: number | null): Record<string, unknown> {
    return {
      kind: this.kind,
      host: this.host,
      pid,
      marker: this.markerPath(marker.session_id),
      log: this.logPath(marker.session_id),
    };
  }

  stop(ref: StopRef): Promise<StopResult> {
    mkdirSync(this.runtimeDir, { recursive: true });
    return stopDispatchedAgent(this.markerPath(ref.sessionId), ref);
  }

  async start(req: StartRequest): Promise<StartedRuntime> {
    const marker = this.markerPath(req.sessionId);
    const [cmd, ...args] = req.command;
    const base = {
      idempotency_key: req.idempotencyKey,
      session_id: req.sessionId,
      generation: req.generation,
    };
    const starting: StartMarker = { ...base, state: 'starting', pid: null };
    // A fresh session (every first start) has no marker: it is created first, and read only when one was there —
    // the same decisions as reading first, without a read that fails on every first start.
    if (cmd && this.createMarker(marker, starting)) return await this.spawnAgent(req, cmd, args, base);
    const existing = readMarker(marker);
    if (existing) {
      const doc = existing.doc;
      if (doc.idempotency_key !== req.idempotencyKey)
        throw new ExecutorError('start marker belongs to another dispatch', 'ambiguous');
      if (doc.generation > req.generation)
        throw new ExecutorError(`claim generation ${doc.generation} owns this dispatch`, 'stale');
      if (doc.state === 'starting') throw new ExecutorError('an earlier start may have spawned the agent', 'ambiguous');
      if (doc.state === 'started') {
        return {
          pid: doc.pid,
          handle: this.handle(doc, doc.pid),
          startMarkerSha256: markerSha256(existing.text),
          started: false,
        };
      }
    } else if (cmd) {
      // It was there when this start tried to create its own, and gone when read: another start moved it.
      throw new ExecutorError('another start raced this one', 'ambiguous');
    }
    if (!cmd) throw new ExecutorError('agent profile has an empty command', 'no_dispatch');
    // `refused`: the OS never started it; starting again is safe once the marker is ours.
    if (!retireMarker(marker, existing!.doc.generation))
      throw new ExecutorError('another start raced this one', 'ambiguous');
    if (!this.createMarker(marker, starting)) {
      throw new ExecutorError('another start created the marker first', 'ambiguous');
    }
    return await this.spawnAgent(req, cmd, args, base);
  }

  /** `createMarkerExclusive`, creating the runtime directory the first time a marker finds it missing. */
  private createMarker(path: string, doc: StartMarker): boolean {
    try {
      return createMarkerExclusive(path, doc);
    } catch (err) {
      if ((err as NodeJS.ErrnoException | null)?.code !== 'ENOENT') throw err;
      mkdirSync(this.runtimeDir, { recursive: true });
      return createMarkerExclusive(path, doc);
    }
  }

  private async spawnAgent(
    req: StartRequest,
    cmd: string,
    args: string[],
    base: Pick<StartMarker, 'idempotency_key' | 'session_id' | 'generation'>,
  ): Promise<StartedRuntime> {
    const marker = this.markerPath(req.sessionId);
    const logPath = this.logPath(req.sessionId);
    let pid: number | null;
    try {
      ({ pid } = await this.spawner.spawn({
        cmd,
        args,
        cwd: req.cwd,
        env: { ...req.env, [DISPATCH_KEY_ENV]: req.idempotencyKey },
        logPath,
        exitPath: this.exitPath(req.sessionId),
      }));
    } catch (err) {
      if (err instanceof SpawnRefused) {
        // The OS refused to start it (ENOENT, EACCES): proven not dispatched.
        replaceMarker(marker, { ...base, state: 'refused', pid: null });
        throw new ExecutorError(`could not start ${cmd}: ${err.message}`, 'no_dispatch');
      }
      // The spawner went away with the request in flight: the agent may run (the marker stays `starting`).
      throw new ExecutorError(`the start of ${cmd} was lost: ${(err as Error).message}`, 'ambiguous');
    }
    const doc: StartMarker = { ...base, state: 'started', pid, log: logPath };
    const text = replaceMarker(marker, doc);
    return { pid, handle: this.handle(doc, pid), startMarkerSha256: markerSha256(text), started: true };
  }

  observe(ref: DispatchRef): Promise<DispatchObservation> {
    return Promise.resolve(this.observeSync(ref));
  }

  private observeSync(ref: DispatchRef): DispatchObservation {
    const none = (reason: string): DispatchObservation => ({ proof: null, reason });
    let found;
    try {
      found = readMarker(this.markerPath(ref.sessionId));
    } catch (err) {
      return none(`start marker unreadable: ${(err as Error).message}`);
    }
    const pids = findDispatchProcesses(ref.idempotencyKey);
    if (pids === null) return none('processes cannot be enumerated on this host');
    const local = ref.lastOwner != null && ownerHost(ref.lastOwner) === this.host;
    const noDispatch = (marker: 'absent' | 'refused'): DispatchObservation =>
      local
        ? {
            proof: 'no_dispatch',
            evidence: {
              idempotency_key: ref.idempotencyKey,
              generation: ref.generation,
              executor: this.kind,
              host: this.host,
              marker,
              processes: 0,
            },
          }
        : none(`the claim was last held by ${ref.lastOwner ?? 'an unrecorded owner'}, not on ${this.host}`);
    if (!found) return pids.length === 0 ? noDispatch('absent') : none('a process carries the key but no marker');
    const { doc, text } = found;
    if (doc.idempotency_key !== ref.idempotencyKey) return none('the start marker belongs to another dispatch');
    if (doc.generation > ref.generation) return none(`the start marker is from a later generation ${doc.generation}`);
    const alive = pids.length > 0;
    const runtime = (pid: number | null, exit: ExitRecord | null): DispatchObservation => ({
      proof: 'runtime',
      runtime: {
        idempotencyKey: ref.idempotencyKey,
        pid,
        handle: this.handle(doc, pid),
        startMarkerSha256: markerSha256(text),
        alive,
        exit,
      },
    });
    switch (doc.state) {
      case 'refused':
        return alive ? none('a refused marker but a process carries the key') : noDispatch('refused');
      case 'starting':
        // The worker died between spawn and writing `started`: only a live process proves the start.
        if (!alive) return none('the start marker says starting and no process carries the key');
        return runtime(pids.length === 1 ? pids[0]! : null, null);
      case 'started': {
        let exit: ExitRecord | null = null;
        try {
          exit = readExitRecord(this.exitPath(ref.sessionId));
        } catch {
          exit = null;
        }
        if (exit !== null && exit.pid !== doc.pid) exit = null;
        // `started` is written only after a successful spawn: the agent ran. Neither alive nor a recorded exit
        // means it ended while no worker watched (its worker died too): reconciled as exited, never restarted.
        return runtime(doc.pid, exit);
      }
    }
  }
}
