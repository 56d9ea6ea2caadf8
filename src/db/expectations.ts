/**
 * Writes whose answer a transaction does not wait for (`Tx.expect`), kept
 * until the runner settles them before COMMIT.
 *
 * Contract: `track(result, affected, mismatch)` watches one write's result
 * and returns its entry; `trackCheck(check)` watches a verification of
 * statements issued without waiting (`Tx.checkLater`: a read-back), whose
 * rejection is its failure; `settle(except)` waits for every tracked write but
 * the entries in `except` (sent later, with COMMIT) and throws the first, in
 * issue order, whose affected-row count was not `affected` (`mismatch()`) or
 * whose statement failed (its error), or the first check that rejected.
 * `firstMismatch` names, without waiting, the first write already
 * answered with the wrong count: a transaction that failed later reports
 * that instead, since what failed later may only have followed from it. Holds no connection and sends
 * nothing itself.
 */
import type { StatementResult } from './batch';

export interface Tracked {
  /** Set once answered: null when the count was right, else the error to report. */
  failure: unknown;
  mismatch: boolean;
  readonly affected: number;
  readonly answer: Promise<void>;
}

export class Expectations {
  private readonly tracked: Tracked[] = [];

  track(result: Promise<StatementResult>, affected: number, mismatch: () => Error): Tracked {
    return this.watch(affected, (entry) =>
      result.then((r) => {
        if (r.affected === affected) return;
        entry.failure = mismatch();
        entry.mismatch = true;
      }),
    );
  }

  trackCheck(check: Promise<unknown>): Tracked {
    return this.watch(0, () => check.then(() => undefined));
  }

  /** One tracked entry: `settled` resolves when answered (recording a mismatch itself); a rejection is its failure. */
  private watch(affected: number, settled: (entry: { failure: unknown; mismatch: boolean }) => Promise<void>): Tracked {
    const entry: { -readonly [K in keyof Tracked]: Tracked[K] } = {
      failure: null,
      mismatch: false,
      affected,
      answer: Promise.resolve(),
    };
    entry.answer = settled(entry).catch((err: unknown) => {
      entry.failure = err;
    });
    this.tracked.push(entry);
    return entry;
  }

  async settle(except: ReadonlySet<Tracked> = new Set()): Promise<void> {
    const waiting = this.tracked.filter((t) => !except.has(t));
    await Promise.all(waiting.map((t) => t.answer));
    const failed = waiting.find((t) => t.failure !== null);
    if (failed) throw failed.failure;
  }

  get firstMismatch(): Error | null {
    const found = this.tracked.find((t) => t.mismatch);
    return found ? (found.failure as Error) : null;
  }
}
