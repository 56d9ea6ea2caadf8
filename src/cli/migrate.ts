/**
 * `taskledger migrate [--create] [--status]`: applies the migration history
 * (migrations/) to the database named by TASKLEDGER_DB_URL, each migration in
 * its own transaction, and prints what it applied. `--create` first creates
 * the database if it does not exist; `--status` changes nothing and lists
 * every migration as applied or pending.
 *
 * Exit codes: 0 done, 1 the database could not be reached or a migration
 * failed (one line on stderr, the URL shown without its password), 2 bad
 * options.
 */
import { parseArgs } from 'node:util';
import type { DataSource } from 'typeorm';
import { ensureDatabase } from '../db/admin';
import { dbConfigFromEnv, type DbConfig } from '../db/config';
import { createDataSource } from '../db/data-source';
import { describeError } from './cli-db';
import { redactUrl, scrubPassword } from './redact';
import { EXIT } from './usage';

const USAGE = `usage: taskledger migrate [--create] [--status]
  --create   create the database named in TASKLEDGER_DB_URL first if it does not exist
  --status   list applied and pending migrations; change nothing`;

interface MigrationStatus {
  applied: string[];
  pending: string[];
}

/** The first useful message of a driver error (Node reports a refused dual-stack connect as an AggregateError with an empty message). */
/** PostgreSQL 3D000 / MySQL 1049: the server answered but the database does not exist. */
function isMissingDatabase(err: unknown): boolean {
  const e = err as { code?: string; errno?: number };
  return e.code === '3D000' || e.errno === 1049;
}

/** Names of the applied migrations (from the migrations table) and of the ones this build would still apply. */
async function migrationStatus(ds: DataSource): Promise<MigrationStatus> {
  const table = ds.options.migrationsTableName ?? 'migrations';
  const qr = ds.createQueryRunner();
  let applied: string[] = [];
  try {
    if (await qr.hasTable(table)) {
      const rows = (await qr.query(`SELECT name FROM ${table} ORDER BY id`)) as { name: string }[];
      applied = rows.map((r) => r.name);
    }
  } finally {
    await qr.release();
  }
  const done = new Set(applied);
  const known = ds.migrations.map((m) => m.name ?? m.constructor.name);
  return { applied, pending: known.filter((name) => !done.has(name)) };
}

function summary(applied: number, pending: number, config: DbConfig): string {
  return `migrations: ${applied} applied, ${pending} pending (${config.dialect})`;
}

export async function migrateCommand(args: string[]): Promise<number> {
  let options: { create?: boolean; status?: boolean; help?: boolean };
  try {
    options = parseArgs({
      args,
      options: { create: { type: 'boolean' }, status: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    console.error(`taskledger migrate: ${describeError(err)}\n${USAGE}`);
    return EXIT.USAGE;
  }
  if (options.help) {
    console.log(USAGE);
    return EXIT.OK;
  }

  let config: DbConfig;
  try {
    config = dbConfigFromEnv();
  } catch (err) {
    console.error(`taskledger migrate: ${describeError(err)}`);
    return EXIT.FAILED;
  }
  const where = redactUrl(config.url);
  const fail = (what: string, err: unknown): number => {
    const message = scrubPassword(describeError(err), config.url).replace(/\s*\n\s*/g, ' ');
    console.error(`taskledger migrate: ${what} ${where}: ${message}`);
    return EXIT.FAILED;
  };

  if (options.create) {
    try {
      await ensureDatabase(config.url);
    } catch (err) {
      return fail('cannot create the database at', err);
    }
  }

  // One connection: migrations run one after another.
  const ds = createDataSource(config, { poolSize: 1 });
  try {
    await ds.initialize();
  } catch (err) {
    const hint = isMissingDatabase(err) ? ' (run "taskledger migrate --create" to create it)' : '';
    return fail('cannot connect to', new Error(describeError(err) + hint));
  }
  try {
    if (options.status) {
      const status = await migrationStatus(ds);
      for (const name of status.applied) console.log(`applied  ${name}`);
      for (const name of status.pending) console.log(`pending  ${name}`);
      console.log(summary(status.applied.length, status.pending.length, config));
      return EXIT.OK;
    }
    const ran = await ds.runMigrations({ transaction: 'each' });
    for (const m of ran) console.log(`applied  ${m.name}`);
    const after = await migrationStatus(ds);
    console.log(summary(ran.length, after.pending.length, config));
    return EXIT.OK;
  } catch (err) {
    return fail('migration failed on', err);
  } finally {
    await ds.destroy();
  }
}
