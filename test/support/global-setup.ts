/**
 * Recreates this project's test database and runs every migration once,
 * before any test file of the project starts.
 */
import type { TestProject } from 'vitest/node';
import { dialectOf } from '../../src/db/config';
import { dropDatabase, recreateDatabase } from '../../src/db/admin';
import { createDataSource } from '../../src/db/data-source';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const url = project.config.env.TASKLEDGER_DB_URL as string;
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
  };
}
