/**
 * A queued outbox wake-up (what the reaper's sweep sends for an undelivered
 * event) in a process that also runs the launch role takes the same pass as
 * the delivery after Complete: the agent starts in place, and no launch job
 * goes through Redis (ADR 0007). Both dialects.
 */
import type { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { LAUNCH_QUEUE, OUTBOX_QUEUE } from '../../queues/names';
import { completeTaskCreation } from '../../src/store/complete';
import type { OperationAuthority } from '../../src/store/types';
import { count, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { startWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld | undefined;
afterAll(async () => {
  await w?.stop();
});

describe('a queued outbox wake-up', () => {
  it('delivers task.created and starts the agent in place: no launch job', async () => {
    w = await startWorld(t.db, ['outbox', 'launch']);
    const res = await begin(t.db, w.ws, { start_agent: true, agent_profile_id: w.ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, w.ws.dataDir);
    // Completed outside the fleet: nothing delivers the event until the wake-up below.
    expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    expect(await count(t.db, 'event_outbox', 'operation_id = ? AND delivered_at IS NULL', [res.operationId])).toBe(1);

    await w.fleet.queues.get(OUTBOX_QUEUE).add('dispatch', { workspaceId: w.ws.workspaceId });
    // The launch starts before its event is marked delivered, so wait for both.
    await waitFor('the agent to be launched and its event marked delivered', async () => {
      const launched = await count(
        t.db,
        'task_launch_dispatch_claims',
        "creation_operation_id = ? AND state = 'succeeded'",
        [res.operationId],
      );
      const delivered = await count(t.db, 'event_outbox', 'operation_id = ? AND delivered_at IS NOT NULL', [
        res.operationId,
      ]);
      return launched === 1 && delivered === 1 ? true : null;
    });
    const launchQueue = w.fleet.queues.get(LAUNCH_QUEUE);
    const redis = (await launchQueue.client) as unknown as Redis;
    expect(await redis.xlen(launchQueue.keys.events!)).toBe(0);
  });
});
