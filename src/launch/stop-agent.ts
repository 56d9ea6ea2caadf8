/**
 * Stopping a dispatched agent and proving it stopped (the local executor's
 * `stop`, used by the cleanup worker's `launch_dispatch` jobs when a task or
 * its workspace is deleted). I/O only: never call inside a SQL transaction.
 *
 * 1. Fence: the session's start marker is made to name a later generation
 *    than the claim's (`refused`, created exclusively when absent, or
 *    replacing a `refused` one), so a worker still holding the fenced claim
 *    finds its start stale and starts nothing. A `starting`/`started` marker
 *    is left: that agent may run, and is stopped next.
 * 2. Stop: every process carrying the dispatch key in its environment
 *    (`TASKLEDGER_DISPATCH_KEY`, inherited by every descendant) gets SIGTERM
 *    (its process group, since agents start detached as group leaders),
 *    then SIGKILL after the grace period.
 * 0. With `onlyIfStartedHere` (the ledger names no host), nothing is done
 *    unless this host's start marker carries the dispatch key.
 * 3. Proof: no process carries the key any more (on this host). Processes
 *    that cannot be enumerated (no /proc), or that survive SIGKILL, are no
 *    proof: the caller retries later.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { findDispatchProcesses } from './dispatch-processes';
import { createMarkerExclusive, readMarker, retireMarker, type MarkerState } from './start-marker';

export interface StopRef {
  idempotencyKey: string;
  sessionId: string;
  /** The fenced claim's generation: the marker is made to name a later one. */
  generation: number;
  /**
   * The ledger does not know the agent's host: act only when this host's start marker for the session carries the
   * dispatch key (the dispatch ran here); otherwise absence here proves nothing (`elsewhere`).
   */
  onlyIfStartedHere?: boolean;
}

export type StopResult =
  | { stopped: true; signalled: number; marker: MarkerState | 'absent' }
  | { stopped: false; reason: string; elsewhere?: boolean };

/** Why 3 s: an agent gets a moment to flush and exit on SIGTERM before SIGKILL; a cleanup pass stays short. */
const GRACE_MS = 3_000;
const POLL_MS = 100;

function signal(pids: readonly number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(-pid, sig);
    } catch {
      try {
        process.kill(pid, sig);
      } catch {
        // Already gone.
      }
    }
  }
}

async function waitGone(key: string, ms: number): Promise<number[] | null> {
  const deadline = Date.now() + ms;
  for (;;) {
    const pids = findDispatchProcesses(key);
    if (pids === null || pids.length === 0 || Date.now() >= deadline) return pids;
    await sleep(POLL_MS);
  }
}

/** Makes any later start of this key stale; returns the marker state it leaves. */
function fenceMarker(markerPath: string, ref: StopRef): MarkerState | 'absent' | { error: string } {
  const fence = {
    idempotency_key: ref.idempotencyKey,
    session_id: ref.sessionId,
    generation: ref.generation + 1,
    state: 'refused' as const,
    pid: null,
  };
  for (let i = 0; i < 3; i++) {
    const found = readMarker(markerPath);
    if (!found) {
      if (createMarkerExclusive(markerPath, fence)) return 'refused';
      continue;
    }
    const { doc } = found;
    if (doc.idempotency_key !== ref.idempotencyKey) return { error: 'the start marker belongs to another dispatch' };
    if (doc.state !== 'refused' || doc.generation > ref.generation) return doc.state;
    if (!retireMarker(markerPath, doc.generation)) continue;
  }
  return { error: 'the start marker kept changing while it was fenced' };
}

export async function stopDispatchedAgent(markerPath: string, ref: StopRef): Promise<StopResult> {
  let marker: MarkerState | 'absent' | { error: string };
  try {
    if (ref.onlyIfStartedHere && readMarker(markerPath)?.doc.idempotency_key !== ref.idempotencyKey) {
      return { stopped: false, elsewhere: true, reason: 'no start marker of this dispatch on this host' };
    }
    marker = fenceMarker(markerPath, ref);
  } catch (err) {
    return { stopped: false, reason: `start marker: ${(err as Error).message}` };
  }
  if (typeof marker === 'object') return { stopped: false, reason: marker.error };
  const pids = findDispatchProcesses(ref.idempotencyKey);
  if (pids === null) return { stopped: false, reason: 'processes cannot be enumerated on this host' };
  if (pids.length === 0) return { stopped: true, signalled: 0, marker };
  signal(pids, 'SIGTERM');
  let left = await waitGone(ref.idempotencyKey, GRACE_MS);
  if (left !== null && left.length > 0) {
    signal(left, 'SIGKILL');
    left = await waitGone(ref.idempotencyKey, GRACE_MS);
  }
  if (left === null) return { stopped: false, reason: 'processes cannot be enumerated on this host' };
  if (left.length > 0) return { stopped: false, reason: `${left.length} process(es) survived SIGKILL` };
  return { stopped: true, signalled: pids.length, marker };
}
