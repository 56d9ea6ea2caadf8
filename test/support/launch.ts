/**
 * Runs one launch job the way a launch worker does, with the local-process
 * executor under `<dataDir>/runtime` (tests whose agent is `true`).
 */
import { join } from 'node:path';
import type { LaunchJob } from '../../queues/names';
import type { Db } from '../../src/db/tx';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { processLaunchJob } from '../../src/launch/launch-worker';
import type { OutboxMark } from '../../src/store/outbox-mark';
import { silentLogger } from '../../src/log';

export function launchNow(db: Db, dataDir: string, job: LaunchJob, workerId = 'test-launcher', mark?: OutboxMark) {
  return processLaunchJob(
    {
      db,
      executor: new LocalProcessExecutor(join(dataDir, 'runtime')),
      dataDir,
      log: silentLogger(),
      metrics: null,
      workerId,
      leaseMs: 60_000,
    },
    job,
    mark,
  );
}
