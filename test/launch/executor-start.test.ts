/**
 * The local executor's start decisions (src/launch/executor.ts), held by the start marker alone: a first start
 * creates the runtime directory and its marker exclusively, then spawns once; every later start reads the marker
 * and decides by it — the recorded start replayed, another dispatch's or a `starting` marker ambiguous, a later
 * generation's stale, a `refused` one retired and started over — spawning nothing where it refuses. A recording
 * spawner stands in for the helper process (test/launch/spawner.test.ts drives the real ones). Runs in both dialect
 * projects (no database).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { ExecutorError, LocalProcessExecutor, type StartRequest } from '../../src/launch/executor';
import { markerSha256, readMarker, type StartMarker } from '../../src/launch/start-marker';
import type { AgentSpawner } from '../../src/launch/spawner';

/** Records each spawn and answers a made-up pid: nothing is started. */
function recordingSpawner(): AgentSpawner & { spawned: string[] } {
  const spawned: string[] = [];
  return {
    spawned,
    spawn: (req) => {
      spawned.push(req.cmd);
      return Promise.resolve({ pid: 40_000 + spawned.length });
    },
    close: () => undefined,
  };
}

function setup() {
  // The runtime directory does not exist yet: the first start creates it.
  const runtimeDir = join(mkdtempSync(join(tmpdir(), 'taskledger-executor-')), 'runtime');
  const spawner = recordingSpawner();
  const executor = new LocalProcessExecutor(runtimeDir, { spawner, host: 'test-host' });
  const req: StartRequest = {
    idempotencyKey: 'task-launch/op-1/session-1',
    generation: 1,
    sessionId: 'session-1',
    taskId: 'task-1',
    operationId: 'op-1',
    command: ['agent', '--run'],
    cwd: runtimeDir,
    env: {},
  };
  const marker = executor.markerPath(req.sessionId);
  const place = (doc: Partial<StartMarker>) => {
    mkdirSync(runtimeDir, { recursive: true });
    const full = { idempotency_key: req.idempotencyKey, session_id: req.sessionId, generation: 1, pid: null, ...doc };
    writeFileSync(marker, canonicalJson(full));
    return readFileSync(marker, 'utf8');
  };
  const failure = async (r: StartRequest) => {
    const err = await executor.start(r).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExecutorError);
    return (err as ExecutorError).failureClass;
  };
  return { runtimeDir, spawner, executor, req, marker, place, failure };
}

describe('local executor start', () => {
  it('a first start creates the runtime directory and a started marker, spawning once; a repeat replays it', async () => {
    const s = setup();
    expect(existsSync(s.runtimeDir)).toBe(false);
    const first = await s.executor.start(s.req);
    expect(first).toMatchObject({ started: true, pid: 40_001 });
    expect(s.spawner.spawned).toEqual(['agent']);
    const text = readFileSync(s.marker, 'utf8');
    expect(readMarker(s.marker)?.doc).toMatchObject({ state: 'started', pid: 40_001, generation: 1 });
    expect(first.startMarkerSha256).toBe(markerSha256(text));
    // No temporary file is left beside the marker.
    expect(existsSync(`${s.marker}.${process.pid}.1.new`)).toBe(false);

    const again = await s.executor.start(s.req);
    expect(again).toMatchObject({ started: false, pid: 40_001, startMarkerSha256: first.startMarkerSha256 });
    expect(s.spawner.spawned).toHaveLength(1);
    expect(readFileSync(s.marker, 'utf8')).toBe(text);
  });

  it('a marker of another dispatch, a starting one or a later generation refuses the start and spawns nothing', async () => {
    const s = setup();
    const other = s.place({ idempotency_key: 'task-launch/op-2/session-1', state: 'started', pid: 7 });
    expect(await s.failure(s.req)).toBe('ambiguous');
    expect(readFileSync(s.marker, 'utf8')).toBe(other);

    const starting = s.place({ state: 'starting' });
    expect(await s.failure(s.req)).toBe('ambiguous');
    expect(readFileSync(s.marker, 'utf8')).toBe(starting);

    const later = s.place({ state: 'started', generation: 2, pid: 8 });
    expect(await s.failure(s.req)).toBe('stale');
    expect(readFileSync(s.marker, 'utf8')).toBe(later);
    expect(s.spawner.spawned).toEqual([]);
  });

  it('a refused marker is retired and the start goes ahead; an empty command spawns nothing and writes nothing', async () => {
    const s = setup();
    const refused = s.place({ state: 'refused', generation: 1 });
    const started = await s.executor.start({ ...s.req, generation: 2 });
    expect(started.started).toBe(true);
    expect(readFileSync(`${s.marker}.refused-g1`, 'utf8')).toBe(refused);
    expect(readMarker(s.marker)?.doc).toMatchObject({ state: 'started', generation: 2 });
    expect(s.spawner.spawned).toEqual(['agent']);

    const empty = setup();
    expect(await empty.failure({ ...empty.req, command: [] })).toBe('no_dispatch');
    expect(existsSync(empty.marker)).toBe(false);
    const kept = empty.place({ state: 'refused' });
    expect(await empty.failure({ ...empty.req, command: [] })).toBe('no_dispatch');
    expect(readFileSync(empty.marker, 'utf8')).toBe(kept);
    expect(empty.spawner.spawned).toEqual([]);
  });
});
