/**
 * `taskledger verify`'s lifecycle pass (src/verify/lifecycle.ts): clean on a
 * workspace with a WIP-limited step, a queued task and a deleted one; each
 * tampering is reported with its code — a step over its limit, a queued task
 * holding a slot, a lost promotion, a second session for one create, a
 * deleted task without its task.deleted or still holding its external ID, a
 * workspace being deleted without its deletion. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { deletionJobBuilder } from '../../src/lifecycle/deletion-jobs';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { completeTaskCreation } from '../../src/store/complete';
import { deleteTask } from '../../src/store/task-delete';
import type { OperationAuthority } from '../../src/store/types';
import { verifyLedger } from '../../src/verify/run';
import { sql, useTestDb } from '../support/db';
import { launchNow } from '../support/launch';
import { begin, driveAllSteps, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { effectDeps } from '../steps/support';

const t = useTestDb();

describe('verify: the task lifecycle', () => {
  it('is clean, then reports each tampering with its code', async () => {
    const ws = await seedWorkspace(t.db);
    await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
      canonicalJson({ kind: 'local', command: ['true'] }),
      ws.agentProfileId,
    ]);
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 1 WHERE id = ?', [ws.stepIds[1]!]);
    const make = async (title: string, body: Record<string, unknown> = {}) => {
      const r = await begin(t.db, ws, { title, ...body });
      const auth: OperationAuthority = { kind: 'handle', handle: r.handle! };
      await driveAllSteps(t.db, auth, r.operationId, ws.dataDir);
      await completeTaskCreation(t.db, auth);
      const intent = (await stepRows(t.db, r.operationId)).find((s) => s.kind === 'launch_intent');
      if (intent)
        await launchNow(t.db, ws.dataDir, {
          operationId: r.operationId,
          taskId: r.task.id,
          sessionId: intent.step_key,
        });
      return r;
    };
    const agent = { start_agent: true, agent_profile_id: ws.agentProfileId, workflow_step_id: ws.stepIds[1] };
    const admitted = await make('admitted', agent);
    const queued = await make('queued', agent);
    const doomed = await make('doomed', { external_id: 'doomed-1' });
    await deleteTask(t.db, doomed.task.id, { requestedBy: 'tester', jobs: deletionJobBuilder(ws.dataDir) });

    const findings = async () =>
      (
        await verifyLedger(
          { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
          { workspaceId: ws.workspaceId, observe: false, maxDrift: 100, pageSize: 50 },
        )
      ).drift.map((d) => `${d.code}: ${d.message}`);
    expect(await findings()).toEqual([]);

    // A queued task that also holds a slot: over the limit, and a queue entry that should not be.
    await sql(t.db, 'UPDATE tasks SET wip_admitted = ? WHERE id = ?', [true, queued.task.id]);
    expect(await findings()).toEqual([
      'wip_slots: 2 admitted tasks for a WIP limit of 1',
      'wip_queue: it also holds a slot',
    ]);
    await sql(t.db, 'UPDATE tasks SET wip_admitted = ? WHERE id = ?', [false, queued.task.id]);

    // The slot freed without promoting the queue.
    await sql(t.db, 'UPDATE tasks SET wip_admitted = ? WHERE id = ?', [false, admitted.task.id]);
    expect(await findings()).toEqual(['wip_queue: its step has a free slot (0 of 1): a lost promotion']);
    await sql(t.db, 'UPDATE tasks SET wip_admitted = ? WHERE id = ?', [true, admitted.task.id]);

    // A second session for one accepted create.
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO task_sessions (id, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id,
                                  launch_config_sha256, state, operation_id, step_id, created_at, updated_at)
       SELECT ?, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id,
              launch_config_sha256, 'prepared', operation_id, step_id, ${now}, ${now}
         FROM task_sessions WHERE task_id = ?`,
      [randomUUID(), admitted.task.id],
    );
    expect(await findings()).toEqual(['launch_count: 2 task_sessions rows for one accepted create']);
    await sql(t.db, "DELETE FROM task_sessions WHERE task_id = ? AND state = 'prepared'", [admitted.task.id]);

    // A deleted task that still holds its external ID, and one whose task.deleted is gone.
    await sql(t.db, 'UPDATE tasks SET external_id = ? WHERE id = ?', ['doomed-1', doomed.task.id]);
    expect(await findings()).toEqual(['task_deleted: it still holds its external ID']);
    await sql(t.db, 'UPDATE tasks SET external_id = NULL WHERE id = ?', [doomed.task.id]);
    const [event] = await sql<Record<string, unknown>>(
      t.db,
      "SELECT * FROM event_outbox WHERE task_id = ? AND type = 'task.deleted'",
      [doomed.task.id],
    );
    await sql(t.db, 'DELETE FROM event_outbox WHERE event_id = ?', [event!.event_id as string]);
    expect(await findings()).toEqual(['task_deleted: 0 task.deleted events']);

    // A workspace being deleted without a deletion.
    await sql(t.db, "UPDATE workspaces SET state = 'deleting' WHERE id = ?", [ws.workspaceId]);
    expect(await findings()).toContain('workspace_deletion: deleting without a workspace deletion');
  });
});
