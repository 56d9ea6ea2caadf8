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

/** Why 2048: a worker has at most a few hundred creations in flight; each entry is a few KiB. */
const CAPACITY = 2048;

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

  constructor(private readonly capacity = CAPACITY) {}

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
