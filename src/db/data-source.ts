/**
 * Builds the TypeORM DataSource for either dialect.
 *
 * Entities and migrations are passed as explicit class lists (no globs), so the
 * same code runs under vitest and bundled into dist/ (scripts/build.mjs).
 * `synchronize` is never on: the schema comes only from the reviewed migration
 * history.
 */
import 'reflect-metadata';
import { DataSource } from 'typeorm';
import { ALL_ENTITIES } from '../../entities/index';
import { ALL_MIGRATIONS } from '../../migrations/index';
import type { DbConfig } from './config';

export interface DataSourceOptions {
  /** Pool size. The default (10) suits one process running every role. */
  poolSize?: number;
  logging?: boolean;
}

/** Deliberately empty: see `onConnect` below. */
function ignoreLostConnection(): void {}

export function createDataSource(config: DbConfig, options: DataSourceOptions = {}): DataSource {
  const poolSize = options.poolSize ?? 10;
  const common = {
    url: config.url,
    entities: ALL_ENTITIES,
    migrations: ALL_MIGRATIONS,
    migrationsTableName: 'taskledger_migrations',
    migrationsTransactionMode: 'each' as const,
    synchronize: false,
    logging: options.logging ?? false,
  };
  if (config.dialect === 'postgres') {
    return new DataSource({
      ...common,
      type: 'postgres',
      poolSize,
      applicationName: config.applicationName ?? 'taskledger',
      extra: {
        // Every connection uses UTC and READ COMMITTED (the server default on PostgreSQL).
        options: '-c timezone=UTC -c default_transaction_isolation=read\\ committed',
        // pg-pool's hook for each new client: a permanent 'error' listener, so a server-side kill that reaches a
        // client in the instant it has no owner listening (between pool and query runner) cannot crash the
        // process. The owner's own listener (TypeORM's, or pg-pool's idle one) still sees the error and drops
        // the client; the command on it restarts (src/db/tx.ts, docs/adr/0010-connection-loss.md).
        onConnect: (client: { on(event: 'error', listener: (err: Error) => void): void }) => {
          client.on('error', ignoreLostConnection);
        },
      },
    });
  }
  return new DataSource({
    ...common,
    type: 'mysql',
    poolSize,
    timezone: 'Z',
    charset: 'utf8mb4_bin',
    supportBigNumbers: true,
    bigNumberStrings: true,
    dateStrings: false,
    // Every connection's session runs READ COMMITTED (set once per connection in src/db/tx.ts):
    // REPEATABLE READ's gap locks on absent rows deadlock inserts (docs/adr/0001-lock-keys.md).
    // One round trip may carry several statements (src/db/batch.ts, docs/adr/0006-statement-batches.md).
    // Every statement binds its values through placeholders, so no caller text is ever spliced in.
    multipleStatements: true,
    extra: { connectionLimit: poolSize },
  });
}
