/**
 * The first wake-ups of a creation come from the step rows Begin wrote
 * (`enqueuePlanned`, no read back): for every plan shape they are exactly the
 * jobs — same queues, same job IDs, same delays — that `enqueueRunnable`
 * sends after reading the ledger. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { enqueuePlanned, enqueueRunnable } from '../../src/coordinator/enqueue';
import { useTestDb } from '../support/db';
import { begin, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';

const t = useTestDb();
const { queues } = useTestQueues('first-wakeup');

/** Every job waiting in any queue, as `queue/jobId/delay`, then emptied. */
async function drain(): Promise<string[]> {
  const out: string[] = [];
  for (const q of queues.all()) {
    for (const job of await q.getJobs(['waiting', 'delayed', 'prioritized'])) {
      out.push(`${q.name}/${job.id}/${job.opts.delay ?? 0}`);
    }
    await q.obliterate({ force: true });
  }
  return out.sort();
}

describe('first wake-ups from the plan', () => {
  const shapes: Record<string, (ws: Awaited<ReturnType<typeof seedWorkspace>>) => Record<string, unknown>> = {
    'ledger-only steps and a launch': (ws) => ({
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    }),
    'a fresh branch next to ledger-only steps': (ws) => ({
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
      repositories: [{ repository_id: ws.repositoryId, fresh_branch: true }],
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    }),
    'no step at all (Complete is due at once)': () => ({}),
  };

  for (const [name, body] of Object.entries(shapes)) {
    it(`are the jobs a read of the ledger sends: ${name}`, async () => {
      const ws = await seedWorkspace(t.db);
      const res = await begin(t.db, ws, body(ws));
      expect(res.outcome).toBe('Created');
      // Begin names exactly the step rows it inserted.
      const rows = await stepRows(t.db, res.operationId);
      expect(res.steps.map((s) => `${s.kind}/${s.step_key}/${s.id}`).sort()).toEqual(
        rows.map((s) => `${s.kind}/${s.step_key}/${s.id}`).sort(),
      );

      await drain();
      const planned = await enqueuePlanned(queues, res.operationId, res.steps);
      const fromPlan = await drain();
      const read = await enqueueRunnable(t.db, queues, res.operationId);
      const fromLedger = await drain();
      expect(fromPlan).toEqual(fromLedger);
      expect(fromPlan.length).toBeGreaterThan(0);
      expect(planned).toEqual(read);
    });
  }
});
