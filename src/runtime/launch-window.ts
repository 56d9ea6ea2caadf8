/**
 * How far back a reaper's sweep looks for stranded launches (a delivered
 * announcing event, or a recent WIP admission, whose armed launch has no
 * dispatch claim: its wake-up was lost with Redis) and for deferred starts
 * whose promotion was lost.
 *
 * Contract (`nextLaunchScan(state, nowMs)`, a pure function of the reaper's
 * own monotonic clock):
 * - a reaper's first scan is full (`windowMs` null): one stranded while no
 *   reaper ran is found by the next reaper to start;
 * - then, at most once every LONG_SCAN_EVERY_MS, a long scan looks back
 *   LONG_WINDOW_MS (15 minutes, what every sweep used to read): anything a
 *   short scan missed (its row limit, a re-sent wake-up that failed again)
 *   is re-sent within a minute, for 15 minutes, as before;
 * - every other sweep is short: it looks back over the time since the
 *   previous scan started plus SHORT_MARGIN_MS, for a delivery whose
 *   transaction committed after that scan read (its `delivered_at` is its
 *   statement's time). A reaper that stalled looks back over its stall, at
 *   most LONG_WINDOW_MS.
 * - `afterScan(state, scan, startedAtMs)` is the state once that scan read.
 *
 * Why: a sweep runs every 5 s in every worker process. Reading 15 minutes of
 * events each time is 72,000 events per sweep at a sustained 80
 * creations/s, where the gap since the last sweep holds 400.
 */
export const LONG_WINDOW_MS = 15 * 60_000;
/** Why a minute: a stranded launch older than the short window is re-sent within a minute, not within 5 s. */
export const LONG_SCAN_EVERY_MS = 60_000;
/** Why 60 s: longer than any delivery transaction runs (statement and lock timeouts are seconds). */
export const SHORT_MARGIN_MS = 60_000;

export interface LaunchScanState {
  /** When the previous scan of any length started. */
  lastScanAtMs: number;
  /** When the previous full or long scan started. */
  lastLongScanAtMs: number;
}

export interface LaunchScan {
  /** How far back to look, in milliseconds; null: the whole ledger. */
  windowMs: number | null;
  kind: 'full' | 'long' | 'short';
}

export function nextLaunchScan(state: LaunchScanState | undefined, nowMs: number): LaunchScan {
  if (state === undefined) return { windowMs: null, kind: 'full' };
  if (nowMs - state.lastLongScanAtMs >= LONG_SCAN_EVERY_MS) return { windowMs: LONG_WINDOW_MS, kind: 'long' };
  const sinceLast = Math.ceil(Math.max(0, nowMs - state.lastScanAtMs));
  return { windowMs: Math.min(LONG_WINDOW_MS, sinceLast + SHORT_MARGIN_MS), kind: 'short' };
}

export function afterScan(state: LaunchScanState | undefined, scan: LaunchScan, startedAtMs: number): LaunchScanState {
  return {
    lastScanAtMs: startedAtMs,
    lastLongScanAtMs: scan.kind === 'short' && state !== undefined ? state.lastLongScanAtMs : startedAtMs,
  };
}
