/**
 * Structured logging (pino). One root logger per process; components take a
 * child with their role, so a duplicate or stale job says so in one line.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(name = 'taskledger', level = process.env.TASKLEDGER_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { pid: process.pid } });
}

/** A logger that discards everything (tests, library use without logs). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
