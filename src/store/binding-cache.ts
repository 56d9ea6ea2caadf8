/**
 * A per-process memo of verified stored documents. Every Store method
 * re-derives the plan and actor bindings of the operation it locks (parse,
 * closed-schema validation, RFC 8785 re-serialisation, SHA-256) and every
 * step's request; that is pure work on immutable bytes, repeated about a dozen
 * times per creation. The memo keeps the result together with EVERY input it
 * was derived from, and a lookup returns it only when all inputs are
 * byte-identical to the row just read under lock, so a tampered or changed row
 * is verified from scratch (and rejected) exactly as without the memo.
 * Results are deep-frozen: a caller cannot change what another caller gets.
 */

/**
 * Entries per memo of a process. Why 512: a memo pays only while its operation is in flight here (its dozen Store
 * calls run within a second or so), and a worker process runs at most a few dozen operations at once
 * (fleet/roles.ts, CONCURRENCY). Each entry keeps a parsed, frozen plan, request or evidence alive, KiBs of heap:
 * at 2,048 (4,096 for the peek memo) a worker's live heap grew by ~25 MB over its first ~5,000 operations, its
 * resident size past 200 MB, and every major GC marked it all (ADR 0049).
 */
export const MEMO_CAPACITY = 512;

export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value as Record<string, unknown>)) deepFreeze(v);
  }
  return value;
}

/** A bounded least-recently-used map whose hits must match every recorded input exactly. */
export class VerifiedMemo<V> {
  private readonly entries = new Map<string, { inputs: readonly unknown[]; value: V }>();

  constructor(private readonly capacity = MEMO_CAPACITY) {}

  /** The memoised value when `inputs` are identical (`===`) to the recorded ones; else runs `derive`. */
  get(key: string, inputs: readonly unknown[], derive: () => V): V {
    const hit = this.entries.get(key);
    if (hit !== undefined && hit.inputs.length === inputs.length && hit.inputs.every((v, i) => v === inputs[i])) {
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit.value;
    }
    const value = deepFreeze(derive());
    this.entries.delete(key);
    this.entries.set(key, { inputs: [...inputs], value });
    if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value as string);
    return value;
  }

  get size(): number {
    return this.entries.size;
  }
}
