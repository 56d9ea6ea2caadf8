import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * Every suite runs once per dialect: the `postgres` and `mysql` projects differ
 * only in TASKLEDGER_DB_URL. Each project's global setup recreates its own test
 * database and applies the migration history, so a run always starts clean;
 * its teardown drops the database again.
 * Override the servers with TASKLEDGER_TEST_PG_URL / TASKLEDGER_TEST_MYSQL_URL.
 */
// One database per run (dropped at the end), so concurrent runs on one machine never collide.
const runId = process.env.TASKLEDGER_TEST_RUN_ID ?? String(process.pid);
const pgUrl = process.env.TASKLEDGER_TEST_PG_URL ?? `postgres://postgres@127.0.0.1:5432/taskledger_test_${runId}`;
const mysqlUrl = process.env.TASKLEDGER_TEST_MYSQL_URL ?? `mysql://root@127.0.0.1:3306/taskledger_test_${runId}`;
const redisUrl = process.env.TASKLEDGER_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
// The sources under test start processes from the native spawner the global setup builds into dist/, as a
// deployment does (src/launch/shared-spawner.ts); test/launch/spawner.test.ts also drives the Node helper.
const spawnerBin = fileURLToPath(new URL('./dist/spawner-native', import.meta.url));
// Every temporary file of a run (seeded repositories, data directories, the processes tests start) goes under one
// directory per project, which its global teardown removes: runs leave nothing behind in the temp directory.
const scratchRoot = join(tmpdir(), `taskledger-test-${runId}`);

function project(name: 'postgres' | 'mysql', url: string) {
  return {
    extends: true as const,
    test: {
      name,
      env: {
        TASKLEDGER_DB_URL: url,
        TASKLEDGER_REDIS_URL: redisUrl,
        TASKLEDGER_TEST_DIALECT: name,
        TASKLEDGER_SPAWNER_BIN: spawnerBin,
        TMPDIR: join(scratchRoot, name),
      },
      globalSetup: ['test/support/global-setup.ts'],
    },
  };
}

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: a few files at a time per project keeps both databases busy
    // without starving them.
    maxWorkers: 2,
    projects: [project('postgres', pgUrl), project('mysql', mysqlUrl)],
  },
});
