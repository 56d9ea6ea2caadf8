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
import type { QueueSet } from '../../src/coordinator/queues';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { sql } from './db';
import { completeTaskCreation } from '../../src/store/complete';
import { claimLaunchDispatch, type DispatchClaim } from '../../src/store/launch-dispatch';
import type { OperationAuthority } from '../../src/store/types';
import { begin, driveAllSteps, stepRows } from './ledger';
import { seedWorkspace } from './seed';

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

/**
 * What a launch test leaves behind: agents started under dispatch keys and BullMQ queue sets. `afterEach(left.clear)`
 * stops every process carrying a key and removes the queues.
 */
export function launchLeftovers() {
  const keys: string[] = [];
  const queueSets: QueueSet[] = [];
  return {
    keys,
    queueSets,
    async clear(): Promise<void> {
      for (const key of keys.splice(0)) {
        for (const pid of findDispatchProcesses(key) ?? []) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
      }
      for (const q of queueSets.splice(0)) {
        for (const queue of q.all()) await queue.obliterate({ force: true });
        await q.close();
      }
    },
  };
}

/** Moves the lease of an operation's `running` dispatch claim a minute into the past (a worker that died). */
export const backdateClaim = (db: Db, operationId: string) =>
  sql(
    db,
    `UPDATE task_launch_dispatch_claims SET lease_expires_at = ${db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'} WHERE creation_operation_id = ? AND state = 'running'`,
    [operationId],
  );

/** A created task whose launch intent is armed, and the claim `claimLaunchDispatch` took for it under `owner`. */
export async function claimedLaunch(
  db: Db,
  owner: string,
  leaseMs: number,
): Promise<{ claim: DispatchClaim; operationId: string }> {
  const ws = await seedWorkspace(db);
  const res = await begin(db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(db, auth, res.operationId, ws.dataDir);
  const done = await completeTaskCreation(db, auth);
  if (done.outcome !== 'Created') throw new Error(`not created: ${JSON.stringify(done)}`);
  const sessionId = (await stepRows(db, res.operationId)).find((r) => r.kind === 'launch_intent')!.step_key;
  const claim = await claimLaunchDispatch(db, { operationId: res.operationId, sessionId }, owner, leaseMs);
  if (!('dispatchId' in claim)) throw new Error(`not claimed: ${JSON.stringify(claim)}`);
  return { claim, operationId: res.operationId };
}
