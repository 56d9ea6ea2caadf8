/**
 * "Creation ended" announcements over Redis pub/sub, so a request waiting
 * for its creation (`createTask` with `wait_ms`) wakes up the moment Complete
 * commits instead of discovering it on its next poll. An announcement is a
 * wake-up, never truth: the waiter re-reads the operation from the ledger, and
 * keeps a slow poll as the fallback for an announcement lost with a dropped
 * connection. What ends a creation announces it: Complete, the recovery
 * actor (finish or abort) and a workspace deletion's cascade.
 *
 * One subscriber connection per process, opened on the first wait; `close()`
 * ends it (QueueSet.close calls it).
 */
import type { Redis } from 'ioredis';

export interface EndSignal {
  /** Resolves when the operation is announced (or the signal is cancelled). */
  readonly promise: Promise<void>;
  cancel(): void;
}

export class CreationEvents {
  private subscriber: Redis | null = null;
  private subscribed: Promise<void> | null = null;
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;
  private subscribedOnce = false;

  constructor(
    private readonly connection: Redis,
    readonly channel: string,
  ) {}

  /** Announces that an operation reached a terminal state (best effort: a lost message only delays a waiter). */
  async announce(operationId: string): Promise<void> {
    await this.connection.publish(this.channel, operationId);
  }

  /** Opens the subscription once; waiters registered before it is ready fall back to polling. */
  ready(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (!this.subscribed) {
      const sub = this.connection.duplicate();
      this.subscriber = sub;
      sub.on('message', (_channel: string, operationId: string) => this.wake(operationId));
      // A failing subscription only costs latency (the poll still runs); errors are not fatal here.
      sub.on('error', () => undefined);
      this.subscribed = sub.subscribe(this.channel).then(
        () => {
          this.subscribedOnce = true;
        },
        () => undefined,
      );
    }
    return this.subscribed;
  }

  /**
   * Announcements reach this process now: the subscription was confirmed and its connection is up (ioredis
   * subscribes again after a reconnect; an announcement sent while it was down is lost, and the poll finds it).
   */
  get listening(): boolean {
    return !this.closed && this.subscribedOnce && this.subscriber?.status === 'ready';
  }

  /** Registers interest in one operation; register before reading its state so no announcement is missed. */
  signal(operationId: string): EndSignal {
    let done!: () => void;
    const promise = new Promise<void>((resolve) => {
      done = resolve;
    });
    let set = this.waiters.get(operationId);
    if (!set) {
      set = new Set();
      this.waiters.set(operationId, set);
    }
    set.add(done);
    const remove = () => {
      const s = this.waiters.get(operationId);
      s?.delete(done);
      if (s && s.size === 0) this.waiters.delete(operationId);
    };
    return {
      promise: promise.then(remove),
      cancel: () => {
        remove();
        done();
      },
    };
  }

  private wake(operationId: string): void {
    const set = this.waiters.get(operationId);
    if (!set) return;
    this.waiters.delete(operationId);
    for (const done of set) done();
  }

  close(): void {
    this.closed = true;
    for (const set of this.waiters.values()) for (const done of set) done();
    this.waiters.clear();
    this.subscriber?.disconnect();
    this.subscriber = null;
  }
}
