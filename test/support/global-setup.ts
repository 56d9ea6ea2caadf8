/**
 * Before any test file of the project starts: builds dist/ from the sources
 * under test (once per run, shared by both projects), then recreates this
 * project's test database and runs every migration once, and makes the
 * project's temp directory (TMPDIR, vitest.config.ts); its teardown drops the
 * database and removes that directory with everything the tests left in it.
 *
 * Why build here: tests that spawn `bin/taskledger.mjs` (test/cli, the crash
 * and pm2 tests in test/fleet and test/deploy, the bench) run the built
 * JavaScript an operator runs, so dist/ must be this checkout's code, never a
 * build left over from an earlier commit (docs/adr/0013-built-javascript.md).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { dialectOf } from '../../src/db/config';
import { dropDatabase, recreateDatabase } from '../../src/db/admin';
import { createDataSource } from '../../src/db/data-source';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Both projects' global setups run in vitest's main process: the first one builds, the other finds it done. */
const shared = globalThis as { taskledgerDistBuilt?: boolean };

function buildDistOnce(): void {
  if (shared.taskledgerDistBuilt) return;
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: ROOT, stdio: 'inherit' });
  shared.taskledgerDistBuilt = true;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  buildDistOnce();
  const url = project.config.env.TASKLEDGER_DB_URL as string;
  const scratch = project.config.env.TMPDIR as string;
  mkdirSync(scratch, { recursive: true });
  await recreateDatabase(url);
  const ds = createDataSource({ url, dialect: dialectOf(url) }, { poolSize: 2 });
  await ds.initialize();
  try {
    await ds.runMigrations({ transaction: 'each' });
  } finally {
    await ds.destroy();
  }
  return async () => {
    if (!process.env.TASKLEDGER_TEST_KEEP_DB) await dropDatabase(url);
    rmSync(scratch, { recursive: true, force: true, maxRetries: 3 });
    try {
      rmdirSync(dirname(scratch)); // The run's directory, once both projects' are gone.
    } catch {
      // The other project still runs, or it is already gone.
    }
  };
}
