/**
 * Captures what a CLI command prints in-process: `console.log` lines in
 * `out`, `console.error` lines in `err`, fresh for each test of the calling
 * suite (`clear()` empties both mid-test).
 */
import { afterEach, beforeEach, vi } from 'vitest';

export interface CapturedConsole {
  readonly out: string[];
  readonly err: string[];
  /** stdout lines joined. */
  text(): string;
  clear(): void;
}

export function captureConsole(): CapturedConsole {
  const out: string[] = [];
  const err: string[] = [];
  const clear = () => {
    out.length = 0;
    err.length = 0;
  };
  beforeEach(() => {
    clear();
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
    vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  return { out, err, text: () => out.join('\n'), clear };
}
