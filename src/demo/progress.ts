/**
 * Progress of the demo batch: counts of answers so far. On a TTY one line is
 * redrawn in place; otherwise (a pipe, a log file, CI) a plain line is printed
 * periodically and only when something changed, so logs stay readable.
 */
import type { ResponseKind } from './batch';

export interface ProgressCounts {
  sent: number;
  total: number;
  created: number;
  found: number;
  pending: number;
  aborted: number;
  rejected: number;
  errors: number;
}

/** Why 100 ms / 2 s: a redraw rate the eye reads as live; a plain line every 2 s keeps a log short. */
const TTY_REDRAW_MS = 100;
const PLAIN_EVERY_MS = 2_000;

export class Progress {
  private readonly counts: ProgressCounts;
  private timer: NodeJS.Timeout | null = null;
  private lastPrinted = '';
  private startedAt = Date.now();

  constructor(
    total: number,
    private readonly out: NodeJS.WriteStream = process.stdout,
  ) {
    this.counts = { sent: 0, total, created: 0, found: 0, pending: 0, aborted: 0, rejected: 0, errors: 0 };
  }

  get snapshot(): ProgressCounts {
    return { ...this.counts };
  }

  record(kind: ResponseKind): void {
    const c = this.counts;
    c.sent += 1;
    if (kind === 'Created' || kind === 'CreatedIdentityLost') c.created += 1;
    else if (kind === 'FoundSettled' || kind === 'FoundUnsettled') c.found += 1;
    else if (kind === 'pending') c.pending += 1;
    else if (kind === 'aborted') c.aborted += 1;
    else if (kind === 'rejected') c.rejected += 1;
    else c.errors += 1;
  }

  line(): string {
    const c = this.counts;
    return `  answered ${c.sent}/${c.total}: created ${c.created}, found ${c.found}, pending ${c.pending}, aborted ${c.aborted}, rejected ${c.rejected}, errors ${c.errors}`;
  }

  start(): void {
    this.startedAt = Date.now();
    const tty = this.out.isTTY === true;
    this.timer = setInterval(() => this.draw(tty), tty ? TTY_REDRAW_MS : PLAIN_EVERY_MS);
  }

  /** Prints the final state, with the elapsed time, on its own line and stops redrawing. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const seconds = ((Date.now() - this.startedAt) / 1000).toFixed(1);
    this.out.write(`${this.out.isTTY === true ? '\r\x1b[K' : ''}${this.line()} (${seconds} s)\n`);
  }

  private draw(tty: boolean): void {
    const text = this.line();
    if (text === this.lastPrinted) return;
    this.lastPrinted = text;
    this.out.write(tty ? `\r\x1b[K${text}` : `${text}\n`);
  }
}
