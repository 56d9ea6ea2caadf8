/**
 * Progress while the bench runs, on stderr (stdout carries only the report).
 * On a terminal one status line is rewritten in place; otherwise (CI logs,
 * pipes) a status line is printed at most every `intervalMs`, and always for
 * the final state of a phase.
 */

export interface ProgressSink {
  /** A lasting line (a phase started or ended). */
  note(text: string): void;
  /** The current status of a running phase; `final` forces a line off a terminal. */
  status(text: string, final?: boolean): void;
  /** Ends the in-place status line, if any. */
  done(): void;
}

export function createProgress(
  stream: NodeJS.WritableStream & { isTTY?: boolean; columns?: number } = process.stderr,
  intervalMs = 5000,
): ProgressSink {
  const tty = stream.isTTY === true;
  let live = false;
  let lastPrinted = 0;
  const clear = () => {
    if (tty && live) {
      stream.write('\r\x1b[2K');
      live = false;
    }
  };
  return {
    note(text) {
      clear();
      stream.write(`${text}\n`);
    },
    status(text, final = false) {
      if (tty) {
        const width = Math.max(20, (stream.columns ?? 120) - 1);
        stream.write(`\r\x1b[2K${text.slice(0, width)}`);
        live = true;
        if (final) {
          stream.write('\n');
          live = false;
        }
        return;
      }
      const now = Date.now();
      if (final || now - lastPrinted >= intervalMs) {
        stream.write(`${text}\n`);
        lastPrinted = now;
      }
    },
    done() {
      if (tty && live) {
        stream.write('\n');
        live = false;
      }
    },
  };
}

/** A sink that prints nothing (library use, tests). */
export const silentProgress: ProgressSink = { note() {}, status() {}, done() {} };
