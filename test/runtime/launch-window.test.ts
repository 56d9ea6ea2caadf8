/**
 * The reaper's stranded-launch window (src/runtime/launch-window.ts): a full
 * scan first, a 15-minute scan at most once a minute, and in between only the
 * time since the previous scan plus a minute's margin, so a reaper no longer
 * reads 15 minutes of events every 5 s.
 */
import { describe, expect, it } from 'vitest';
import {
  afterScan,
  LONG_SCAN_EVERY_MS,
  LONG_WINDOW_MS,
  nextLaunchScan,
  SHORT_MARGIN_MS,
  type LaunchScanState,
} from '../../src/runtime/launch-window';

/** Sweeps every `everyMs` from `startMs`, each scan as the reaper would take it. */
function sweeps(startMs: number, everyMs: number, n: number) {
  let state: LaunchScanState | undefined;
  const scans = [];
  for (let i = 0; i < n; i++) {
    const now = startMs + i * everyMs;
    const scan = nextLaunchScan(state, now);
    scans.push(scan);
    state = afterScan(state, scan, now);
  }
  return scans;
}

describe("a reaper's stranded-launch window", () => {
  it('is the whole ledger on the first sweep', () => {
    expect(nextLaunchScan(undefined, 123)).toEqual({ windowMs: null, kind: 'full' });
  });

  it('every 5 s: 15 minutes once a minute, the gap and a minute in between', () => {
    const scans = sweeps(1_000, 5_000, 26);
    expect(scans[0]).toEqual({ windowMs: null, kind: 'full' });
    for (let i = 1; i < 12; i++) expect(scans[i]).toEqual({ windowMs: 5_000 + SHORT_MARGIN_MS, kind: 'short' });
    expect(scans[12]).toEqual({ windowMs: LONG_WINDOW_MS, kind: 'long' });
    for (let i = 13; i < 24; i++) expect(scans[i]!.kind).toBe('short');
    expect(scans[24]).toEqual({ windowMs: LONG_WINDOW_MS, kind: 'long' });
    // What one minute of sweeps reads, in minutes of events: one long and eleven short, against twelve long.
    const read = scans.slice(12, 24).reduce((sum, s) => sum + (s.windowMs ?? 0), 0);
    expect(read).toBe(LONG_WINDOW_MS + 11 * (5_000 + SHORT_MARGIN_MS));
    expect(read * 6).toBeLessThan(12 * LONG_WINDOW_MS);
  });

  it('a stalled reaper looks back over its stall, at most 15 minutes, and its next sweep is long', () => {
    const state: LaunchScanState = { lastScanAtMs: 100_000, lastLongScanAtMs: 90_000 };
    expect(nextLaunchScan(state, 130_000)).toEqual({ windowMs: 30_000 + SHORT_MARGIN_MS, kind: 'short' });
    expect(nextLaunchScan(state, 90_000 + LONG_SCAN_EVERY_MS)).toEqual({ windowMs: LONG_WINDOW_MS, kind: 'long' });
    const lateShort: LaunchScanState = { lastScanAtMs: 0, lastLongScanAtMs: 10 * 3_600_000 };
    expect(nextLaunchScan(lateShort, 10 * 3_600_000 + 1_000).windowMs).toBe(LONG_WINDOW_MS);
  });

  it('never looks back less than the margin, even when the clock reads the same', () => {
    const state: LaunchScanState = { lastScanAtMs: 50_000, lastLongScanAtMs: 50_000 };
    expect(nextLaunchScan(state, 50_000)).toEqual({ windowMs: SHORT_MARGIN_MS, kind: 'short' });
    expect(nextLaunchScan(state, 50_000.2)).toEqual({ windowMs: 1 + SHORT_MARGIN_MS, kind: 'short' });
  });

  it('a short scan keeps the time of the last long one; a full or long scan sets both', () => {
    const s0 = afterScan(undefined, { windowMs: null, kind: 'full' }, 10);
    expect(s0).toEqual({ lastScanAtMs: 10, lastLongScanAtMs: 10 });
    const s1 = afterScan(s0, { windowMs: 65_000, kind: 'short' }, 5_010);
    expect(s1).toEqual({ lastScanAtMs: 5_010, lastLongScanAtMs: 10 });
    expect(afterScan(s1, { windowMs: LONG_WINDOW_MS, kind: 'long' }, 60_010)).toEqual({
      lastScanAtMs: 60_010,
      lastLongScanAtMs: 60_010,
    });
  });
});
