/**
 * Writes whose answer a transaction does not wait for (`Tx.expect`), kept
 * until the runner settles them before COMMIT.
 *
 * Contract: `track(result, affected, mismatch)` watches one write's result;
 * `settle()` waits for every tracked write and throws the first (in issue
 * order) whose affected-row count was not `affected` (`mismatch()`), or whose
 * statement failed (its error). `firstMismatch` names, without waiting, the
 * first write already answered with the wrong count: a transaction that
 * failed later reports that instead, since what failed later may only have
 * followed from it. Holds no connection and sends nothing itself.
 */
import type { StatementResult } from './batch';

interface Tracked {
  /** Set once answered: null when the count was right, else the error to report. */
  failure: unknown;
  mismatch: boolean;
}

export class Expectations {
  private readonly tracked: Tracked[] = [];
  private readonly answers: Promise<void>[] = [];

  track(result: Promise<StatementResult[]>, affected: number, mismatch: () => Error): void {
    const entry: Tracked = { failure: null, mismatch: false };
    this.tracked.push(entry);
    this.answers.push(
      result.then(
        ([r]) => {
          if ((r?.affected ?? 0) === affected) return;
          entry.failure = mismatch();
          entry.mismatch = true;
        },
        (err: unknown) => {
          entry.failure = err;
        },
      ),
    );
  }

  get size(): number {
    return this.tracked.length;
  }

  async settle(): Promise<void> {
    await Promise.all(this.answers);
    const failed = this.tracked.find((t) => t.failure !== null);
    if (failed) throw failed.failure;
  }

  get firstMismatch(): Error | null {
    const found = this.tracked.find((t) => t.mismatch);
    return found ? (found.failure as Error) : null;
  }
}
