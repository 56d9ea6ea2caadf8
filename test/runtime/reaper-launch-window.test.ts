/**
 * The reaper's stranded-launch scans over time (src/runtime/launch-window.ts,
 * driven by `sweepOnce` with the reaper's clock in the test's hands): a launch
 * stranded five minutes ago is re-sent by the first (full) scan; when that
 * wake-up is lost again, the short scans that follow (the gap and a minute)
 * do not read back that far, and the long scan a minute after the first
 * re-sends it. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { launchJobId, LAUNCH_QUEUE } from '../../queues/names';
import { sweepOnce } from '../../src/runtime/reaper';
import { sql, useTestDb } from '../support/db';
import { settledTask, stepRows } from '../support/ledger';
import { testReaper } from '../support/reaper';
import { seedWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';

const t = useTestDb();
const { queues } = useTestQueues('reaper-window');

describe("a reaper's stranded-launch scans over time", () => {
  it('re-send a launch stranded five minutes ago from the full scan, then from the long scan a minute later', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await settledTask(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    // Delivered five minutes ago by a dispatcher whose launch wake-up was then lost.
    const fiveMinutesAgo = t.db.dialect === 'postgres' ? "now() - interval '5 minutes'" : 'NOW(3) - INTERVAL 5 MINUTE';
    await sql(t.db, `UPDATE event_outbox SET delivered_at = ${fiveMinutesAgo} WHERE operation_id = ?`, [
      res.operationId,
    ]);
    const sessionId = (await stepRows(t.db, res.operationId)).find((s) => s.kind === 'launch_intent')!.step_key;
    const launchJob = () => queues.get(LAUNCH_QUEUE).getJob(launchJobId(res.operationId, sessionId));
    const lose = () => queues.get(LAUNCH_QUEUE).obliterate({ force: true });

    let now = 1_000_000;
    const deps = testReaper(t.db, ws, 'reaper:window', { queues, monotonicNow: () => now });

    expect((await sweepOnce(deps)).wakeups).toBeGreaterThanOrEqual(1);
    expect((await launchJob())?.data).toEqual({ operationId: res.operationId, taskId: res.task.id, sessionId });
    await lose();

    // Short scans (5 s, then 5 s more, and a minute's margin) do not reach five minutes back.
    for (let i = 0; i < 11; i++) {
      now += 5_000;
      await sweepOnce(deps);
      expect(await launchJob()).toBeUndefined();
    }
    // A minute after the full scan: the long scan (15 minutes) re-sends it.
    now += 5_000;
    await sweepOnce(deps);
    expect(await launchJob()).toBeDefined();
  });
});
