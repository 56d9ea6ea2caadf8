/**
 * `singleFlight`: one pass per key at a time, and one trailing pass that
 * every call made during a pass shares; each caller awaits a pass that began
 * after its call and sees that pass's error. Pure logic, no database (runs
 * under both dialect projects like every suite).
 */
import { describe, expect, it } from 'vitest';
import { singleFlight } from '../../src/outbox/single-flight';

function gate() {
  let open!: () => void;
  let fail!: (err: Error) => void;
  const promise = new Promise<void>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { promise, open, fail };
}

describe('singleFlight', () => {
  it('runs one pass per key; calls during it share one trailing pass', async () => {
    const gates: ReturnType<typeof gate>[] = [];
    const started: string[] = [];
    const run = singleFlight(async (key) => {
      started.push(key);
      const g = gate();
      gates.push(g);
      await g.promise;
      return `${key}#${started.length}`;
    });
    const first = run('w1');
    const during = [run('w1'), run('w1'), run('w1')];
    const other = run('w2');
    expect(started).toEqual(['w1', 'w2']);
    gates[0]!.open();
    await expect(first).resolves.toBe('w1#2');
    await new Promise((r) => setTimeout(r, 0));
    // The trailing pass started only after the first ended, and only once for the three calls.
    expect(started).toEqual(['w1', 'w2', 'w1']);
    gates[2]!.open();
    const results = await Promise.all(during);
    expect(new Set(results).size).toBe(1);
    gates[1]!.open();
    await expect(other).resolves.toBe('w2#3');
    // Nothing running: the next call starts a pass of its own at once.
    const later = run('w1');
    expect(started).toHaveLength(4);
    gates[3]!.open();
    await expect(later).resolves.toBe('w1#4');
  });

  it('a failed pass rejects its callers only; the trailing pass still runs for the later ones', async () => {
    const gates: ReturnType<typeof gate>[] = [];
    let passes = 0;
    const run = singleFlight(async () => {
      passes++;
      const g = gate();
      gates.push(g);
      await g.promise;
      return passes;
    });
    const first = run('w');
    const second = run('w');
    gates[0]!.fail(new Error('database went away'));
    await expect(first).rejects.toThrow('database went away');
    await new Promise((r) => setTimeout(r, 0));
    expect(passes).toBe(2);
    gates[1]!.open();
    await expect(second).resolves.toBe(2);
  });
});
