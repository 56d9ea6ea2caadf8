/**
 * A task's life after creation over REST with a real fleet (every role,
 * cleanup included): sixteen concurrent creates into a step with a WIP limit
 * of one start exactly one agent and queue the rest; a move out of the step
 * and a deletion each admit and launch the next queued task once; a deleted
 * task answers 404, its deletion repeats as 204, and its agent is stopped;
 * the workflows read shows the slots; the workspace deletion answers 202 at
 * once (the same ID when asked again), the cascade ends it, every agent
 * stops, and the workspace then answers as one that does not exist while an
 * operator still reads its events. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { findDispatchProcesses } from '../../src/launch/dispatch-processes';
import { count, sql, useTestDb } from '../support/db';
import { useWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world), ['api', 'steps', 'complete', 'outbox', 'launch', 'reaper', 'cleanup']);

async function call(method: string, path: string, body?: unknown, token = w.ws.token) {
  const res = await fetch(`${w.baseUrl}/api/v1${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as Record<string, any> };
}

const ADMIN = 'test-admin-token';

const succeeded = () =>
  count(t.db, 'task_launch_dispatch_claims', "workspace_id = ? AND state = 'succeeded'", [w.ws.workspaceId]);

async function admittedIn(step: string): Promise<string[]> {
  const rows = await sql<{ id: string }>(t.db, 'SELECT id FROM tasks WHERE workflow_step_id = ? AND wip_admitted = ?', [
    step,
    true,
  ]);
  return rows.map((r) => r.id);
}

describe("a task's life over REST", () => {
  it('gates launches by WIP, promotes on move and delete, and deletes the workspace', async () => {
    const limited = w.ws.stepIds[1]!;
    const open = w.ws.stepIds[0]!;
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 1 WHERE id = ?', [limited]);
    // Agents that keep running until they are stopped.
    await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
      canonicalJson({ kind: 'local', command: ['sleep', '120'] }),
      w.ws.agentProfileId,
    ]);
    const creates = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        call('POST', '/tasks?wait_ms=30000', {
          workspace_id: w.ws.workspaceId,
          title: `wip ${i}`,
          start_agent: true,
          agent_profile_id: w.ws.agentProfileId,
          workflow_step_id: limited,
        }),
      ),
    );
    expect(creates.map((c) => c.status)).toEqual(Array(16).fill(200));
    const ids = creates.map((c) => c.body.task.id as string);
    // The admitted task takes its slot with its launch claim, and its claim ends `succeeded` once the agent's start
    // is recorded: the sixteen decisions are made when that record is in too.
    const running = () =>
      count(t.db, 'task_launch_dispatch_claims', "workspace_id = ? AND state = 'running'", [w.ws.workspaceId]);
    await waitFor('sixteen launch decisions', async () =>
      (await count(t.db, 'tasks', 'workflow_step_id = ? AND (wip_admitted = ? OR queued_for_step_id IS NOT NULL)', [
        limited,
        true,
      ])) === 16 && (await running()) === 0
        ? true
        : null,
    );
    expect(await succeeded()).toBe(1);
    const [first] = await admittedIn(limited);
    const workflows = (await call('GET', `/workspaces/${w.ws.workspaceId}/workflows`)).body.workflows;
    expect(workflows[0].steps[1]).toMatchObject({ id: limited, wip_limit: 1, admitted: 1, queued: 15 });
    const detail = (await call('GET', `/tasks/${first}`)).body.task;
    expect(detail).toMatchObject({ wip_admitted: true, queued_for_step_id: null, launch_state: 'succeeded' });
    const queuedOne = ids.find((id) => id !== first)!;
    expect((await call('GET', `/tasks/${queuedOne}`)).body.task).toMatchObject({
      wip_admitted: false,
      queued_for_step_id: limited,
      launch_state: 'queued',
    });

    // A move out of the step admits the oldest queued task, which launches once.
    const moved = await call('PATCH', `/tasks/${first}`, { workflow_step_id: open });
    expect(moved.status).toBe(200);
    expect(moved.body).toMatchObject({ moved: true, task: { workflow_step_id: open, wip_admitted: true } });
    expect(moved.body.promoted).toHaveLength(1);
    const second = moved.body.promoted[0] as string;
    await waitFor('the promoted task to launch', async () => ((await succeeded()) === 2 ? true : null));
    expect(await admittedIn(limited)).toEqual([second]);

    // 4xx: unknown field, unknown step, a member of another workspace sees nothing.
    expect((await call('PATCH', `/tasks/${first}`, { workflow_step_id: open, priority: 1 })).status).toBe(400);
    expect(
      (await call('PATCH', `/tasks/${first}`, { workflow_step_id: '00000000-0000-4000-8000-000000000000' })).status,
    ).toBe(404);

    // Deleting the admitted task admits the next; its agent is stopped; a repeat is 204; it is gone for reads.
    const key = (
      await sql<{ idempotency_key: string }>(
        t.db,
        'SELECT idempotency_key FROM task_launch_dispatch_claims WHERE task_id = ?',
        [second],
      )
    )[0]!.idempotency_key;
    const del = await call('DELETE', `/tasks/${second}`);
    expect(del.status).toBe(202);
    expect(del.body).toMatchObject({ task_id: second, revision: 2 });
    expect(del.body.promoted).toHaveLength(1);
    await waitFor('the next task to launch', async () => ((await succeeded()) === 3 ? true : null));
    expect((await call('DELETE', `/tasks/${second}`)).status).toBe(204);
    expect((await call('GET', `/tasks/${second}`)).status).toBe(404);
    await waitFor('the deleted task agent to stop', async () =>
      findDispatchProcesses(key)?.length === 0 ? true : null,
    );
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.deleted'", [second])).toBe(1);

    // Workspace deletion: operators only, 202 at once, the same ID when asked again.
    expect((await call('DELETE', `/workspaces/${w.ws.workspaceId}`)).status).toBe(403);
    const wsDel = await call('DELETE', `/workspaces/${w.ws.workspaceId}`, undefined, ADMIN);
    expect(wsDel.status).toBe(202);
    const again = await call('DELETE', `/workspaces/${w.ws.workspaceId}`, undefined, ADMIN);
    expect(again).toMatchObject({ status: 202, body: { deletion_operation_id: wsDel.body.deletion_operation_id } });
    const created = await call('POST', '/tasks?wait_ms=0', { workspace_id: w.ws.workspaceId, title: 'too late' });
    expect(created).toMatchObject({ status: 404, body: { error: 'task not created' } });
    const status = await waitFor('the cascade to end', async () => {
      const r = await call('GET', `/workspace-deletions/${wsDel.body.deletion_operation_id}`, undefined, ADMIN);
      return r.body.state === 'completed' ? r.body : null;
    });
    expect(status.counts).toMatchObject({ deleted_tasks: 15, aborted: 0 });
    expect(status.counts.cancelled_launches).toBe(13);
    await waitFor('every cleanup job to finish', async () =>
      (await count(t.db, 'task_resource_cleanup_jobs', "workspace_id = ? AND state <> 'done'", [w.ws.workspaceId])) ===
      0
        ? true
        : null,
    );
    const keys = await sql<{ idempotency_key: string }>(
      t.db,
      'SELECT idempotency_key FROM task_launch_dispatch_claims WHERE workspace_id = ?',
      [w.ws.workspaceId],
    );
    for (const k of keys) expect(findDispatchProcesses(k.idempotency_key)).toEqual([]);
    expect((await call('GET', `/tasks/${first}`)).status).toBe(404);
    expect((await call('GET', `/workspaces/${w.ws.workspaceId}/workflows`)).status).toBe(404);
    const feed = await waitFor('every task.deleted to be delivered', async () => {
      const r = await call('GET', `/workspaces/${w.ws.workspaceId}/events?limit=1000`, undefined, ADMIN);
      const deleted = (r.body.events as { type: string }[]).filter((e) => e.type === 'task.deleted');
      return deleted.length === 16 ? r.body.events : null;
    });
    expect(feed.filter((e: { type: string }) => e.type === 'task.created')).toHaveLength(16);
  });
});
