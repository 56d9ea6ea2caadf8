/**
 * Reads taskledger's configuration from the environment (names and defaults
 * are the public contract in shared/design/API.md).
 */

export type Dialect = 'postgres' | 'mysql';

export interface DbConfig {
  url: string;
  dialect: Dialect;
  /**
   * PostgreSQL's `application_name` for this process's connections
   * (TASKLEDGER_DB_APPLICATION_NAME, default `taskledger`): what an operator
   * sees in `pg_stat_activity`, and how a fault test picks the fleet's
   * connections to kill. MySQL has no equivalent; use a dedicated user.
   */
  applicationName?: string;
}

export const DEFAULT_DB_URL = 'postgres://postgres@127.0.0.1:5432/taskledger';

/** `postgres://` / `postgresql://` selects PostgreSQL; `mysql://` / `mariadb://` selects MySQL/MariaDB. */
export function dialectOf(url: string): Dialect {
  const scheme = url.slice(0, url.indexOf(':')).toLowerCase();
  if (scheme === 'postgres' || scheme === 'postgresql') return 'postgres';
  if (scheme === 'mysql' || scheme === 'mariadb') return 'mysql';
  throw new Error(
    `TASKLEDGER_DB_URL must start with postgres://, postgresql://, mysql:// or mariadb:// (got "${scheme}://")`,
  );
}

export function dbConfigFromEnv(env: NodeJS.ProcessEnv = process.env): DbConfig {
  const url = env.TASKLEDGER_DB_URL && env.TASKLEDGER_DB_URL.trim() !== '' ? env.TASKLEDGER_DB_URL : DEFAULT_DB_URL;
  const applicationName = env.TASKLEDGER_DB_APPLICATION_NAME?.trim() || 'taskledger';
  return { url, dialect: dialectOf(url), applicationName };
}
