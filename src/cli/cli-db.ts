/**
 * The database connection of the read-only operator commands (`ops`,
 * `verify`): configuration from the environment, and every failure as one
 * line on stderr with the URL's password removed, exit code 1, never a stack
 * trace.
 */
import { configFromEnv, type AppConfig } from '../app/config';
import { createDataSource } from '../db/data-source';
import type { Db } from '../db/tx';
import { redactUrl, scrubPassword } from './redact';
import { EXIT } from './usage';

/** An error's message; an empty AggregateError (a refused dual-stack connect) by its first cause. */
export function describeError(err: unknown): string {
  if (err instanceof AggregateError && err.message === '' && err.errors.length > 0) return describeError(err.errors[0]);
  if (err instanceof Error) return err.message || (err as { code?: string }).code || err.name;
  return String(err);
}

/** Runs `fn` with a connected `Db` and returns its exit code; any failure is one line and exit 1. */
export async function withCliDb(
  command: string,
  poolSize: number,
  fn: (db: Db, config: AppConfig) => Promise<number>,
): Promise<number> {
  let config: AppConfig;
  try {
    config = configFromEnv();
  } catch (err) {
    console.error(`taskledger ${command}: ${describeError(err)}`);
    return EXIT.FAILED;
  }
  const line = (what: string, err: unknown) =>
    `taskledger ${command}: ${what}: ${scrubPassword(describeError(err), config.db.url).replace(/\s*\n\s*/g, ' ')}`;
  const ds = createDataSource(config.db, { poolSize });
  try {
    await ds.initialize();
  } catch (err) {
    console.error(line(`cannot connect to ${redactUrl(config.db.url)}`, err));
    return EXIT.FAILED;
  }
  try {
    return await fn({ ds, dialect: config.db.dialect }, config);
  } catch (err) {
    console.error(line('failed', err));
    return EXIT.FAILED;
  } finally {
    await ds.destroy();
  }
}
