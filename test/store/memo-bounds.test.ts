/**
 * The per-process memos (binding-cache.ts, the operation guard's peek memo) stay sized for the operations in
 * flight, not for a process's history (ADR 0049): a hit needs inputs identical to the recorded ones, the least
 * recently used entry goes first, and however many operations pass through a process, no memo holds more than
 * MEMO_CAPACITY of them. Pure: no database is involved, so there is no dialect to run it on.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MEMO_CAPACITY, VerifiedMemo } from '../../src/store/binding-cache';
import { hintOperation, peekMemoSize } from '../../src/store/operation-guard';

describe('per-process memos', () => {
  it('are sized for the operations a worker has in flight, not for thousands', () => {
    // A worker runs a few dozen operations at once (fleet/roles.ts); 2,048 and 4,096 entries kept ~25 MB alive.
    expect(MEMO_CAPACITY).toBeGreaterThanOrEqual(256);
    expect(MEMO_CAPACITY).toBeLessThanOrEqual(1024);
  });

  it('answer a hit only for identical inputs, and re-derive otherwise', () => {
    const memo = new VerifiedMemo<{ n: number }>(4);
    let derived = 0;
    const derive = () => ({ n: ++derived });
    const bytes = '{"a":1}';
    const first = memo.get('op', [bytes, 'kind'], derive);
    expect(memo.get('op', [bytes, 'kind'], derive)).toBe(first);
    expect(derived).toBe(1);
    // Equal text is identical for a primitive string; a changed input re-derives.
    expect(memo.get('op', ['{"a":2}', 'kind'], derive)).toEqual({ n: 2 });
    expect(memo.get('op', ['{"a":2}'], derive)).toEqual({ n: 3 });
    expect(Object.isFrozen(memo.get('op', ['{"a":2}'], derive))).toBe(true);
  });

  it('drop the least recently used entry beyond their capacity', () => {
    const memo = new VerifiedMemo<string>(3);
    const derived: string[] = [];
    const get = (k: string) =>
      memo.get(k, [k], () => {
        derived.push(k);
        return k;
      });
    get('a');
    get('b');
    get('c');
    get('a'); // a is now the most recent
    get('d'); // evicts b
    expect(memo.size).toBe(3);
    get('a');
    get('c');
    get('d');
    expect(derived).toEqual(['a', 'b', 'c', 'd']);
    get('b');
    expect(derived).toEqual(['a', 'b', 'c', 'd', 'b']);
  });

  it('hold at most MEMO_CAPACITY entries however many operations pass', () => {
    const memo = new VerifiedMemo<number>();
    for (let i = 0; i < 5 * MEMO_CAPACITY; i++) memo.get(`op-${i}`, [i], () => i);
    expect(memo.size).toBe(MEMO_CAPACITY);

    for (let i = 0; i < 5 * MEMO_CAPACITY; i++) {
      hintOperation(randomUUID(), { workspaceId: randomUUID(), taskId: randomUUID(), externalId: false });
    }
    expect(peekMemoSize()).toBe(MEMO_CAPACITY);
  });
});
