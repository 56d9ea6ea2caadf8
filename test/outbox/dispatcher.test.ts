/**
 * The outbox dispatcher's pass: every undelivered event of the workspace in
 * sequence order, each launch event's agent started (here: in place) before
 * the event is marked; and an event another process's pass marked delivered
 * after this pass read its batch is skipped, with no second launch attempt
 * and no mark. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { LAUNCH_QUEUE, type LaunchJob } from '../../queues/names';
import { QueueSet } from '../../src/coordinator/queues';
import { silentLogger } from '../../src/log';
import { processOutboxJob, type OutboxEvent } from '../../src/outbox/dispatcher';
import { createRedis } from '../../src/runtime/redis';
import { completeTaskCreation } from '../../src/store/complete';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
const redis = createRedis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379');
const queues = new QueueSet(redis, `tl-dispatcher-${randomUUID()}`);
afterAll(async () => {
  for (const q of queues.all()) await q.obliterate({ force: true });
  await queues.close();
  redis.disconnect();
});

/** A completed creation whose task.created is still undelivered; returns its operation id. */
async function completed(ws: SeededWorkspace, startAgent: boolean): Promise<string> {
  const res = await begin(t.db, ws, startAgent ? { start_agent: true, agent_profile_id: ws.agentProfileId } : {});
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
  expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
  return res.operationId;
}

const undelivered = (ws: SeededWorkspace) =>
  count(t.db, 'event_outbox', 'workspace_id = ? AND delivered_at IS NULL', [ws.workspaceId]);

describe('outbox dispatcher', () => {
  it('delivers every event in order and starts each launch before marking it', async () => {
    const ws = await seedWorkspace(t.db);
    const ops = [await completed(ws, true), await completed(ws, false), await completed(ws, true)];
    const launched: string[] = [];
    const seen: OutboxEvent[] = [];
    const launchInPlace = async (job: LaunchJob) => {
      // The event is not marked yet while its agent starts.
      expect(await count(t.db, 'event_outbox', 'operation_id = ? AND delivered_at IS NULL', [job.operationId])).toBe(1);
      launched.push(job.operationId);
    };
    const deps = {
      db: t.db,
      queues,
      log: silentLogger(),
      metrics: null,
      subscribers: [(e: OutboxEvent) => seen.push(e)],
    };
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(3);
    expect(launched).toEqual([ops[0], ops[2]]);
    expect(seen.map((e) => e.operation_id)).toEqual(ops);
    expect(await undelivered(ws)).toBe(0);
  });

  it('skips an event another pass marked after this one read it: no second launch, no mark', async () => {
    const ws = await seedWorkspace(t.db);
    const [first, second] = [await completed(ws, true), await completed(ws, true)];
    const launched: string[] = [];
    const launchInPlace = async (job: LaunchJob) => {
      launched.push(job.operationId);
      // Meanwhile another process's pass delivers the second event.
      await sql(
        t.db,
        'UPDATE event_outbox SET delivered_at = created_at, delivery_attempts = 1 WHERE operation_id = ?',
        [second],
      );
    };
    const launchJobsBefore = (await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0;
    const deps = { db: t.db, queues, log: silentLogger(), metrics: null };
    expect(await processOutboxJob(deps, { workspaceId: ws.workspaceId }, { launchInPlace })).toBe(1);
    expect(launched).toEqual([first]);
    expect((await queues.get(LAUNCH_QUEUE).getJobCounts('waiting')).waiting ?? 0).toBe(launchJobsBefore);
    const [row] = await sql<{ delivery_attempts: number | string }>(
      t.db,
      'SELECT delivery_attempts FROM event_outbox WHERE operation_id = ?',
      [second],
    );
    expect(Number(row!.delivery_attempts)).toBe(1);
    expect(await undelivered(ws)).toBe(0);
  });
});
