/**
 * Gathers the requests callers issue within a few microtask turns of each
 * other and hands them to `send` together, in issue order
 * (docs/adr/0006-statement-batches.md): the reads a command issues
 * concurrently outside any transaction (`readRows`) share one round trip.
 *
 * Contract: `add(item)` returns the promise `send` settles for that item;
 * `send(batch)` must settle every item of its batch. A caller that awaits
 * one request at a time gets one batch per request, as before.
 */
export interface Queued<I, R> {
  item: I;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

/**
 * Why 8 turns: as for a transaction's statements (src/db/tx.ts, FLUSH_TURNS), callers issuing reads together
 * (`Promise.all`) reach them within a few resolved awaits of each other.
 */
const TURNS = 8;

export class Coalescer<I, R> {
  private queued: Queued<I, R>[] = [];
  private scheduled = false;

  constructor(private readonly send: (batch: Queued<I, R>[]) => Promise<void>) {}

  add(item: I): Promise<R> {
    const result = new Promise<R>((resolve, reject) => this.queued.push({ item, resolve, reject }));
    if (!this.scheduled) {
      this.scheduled = true;
      this.after(TURNS);
    }
    return result;
  }

  private after(turns: number): void {
    queueMicrotask(() => (turns > 0 ? this.after(turns - 1) : this.flush()));
  }

  private flush(): void {
    this.scheduled = false;
    const batch = this.queued.splice(0);
    this.send(batch).catch((err: unknown) => {
      for (const q of batch) q.reject(err);
    });
  }
}
