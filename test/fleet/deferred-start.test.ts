/**
 * A deferred start end to end, over REST with a real fleet: a task created
 * with `blocked_by` and `start_agent` completes with no session and no agent;
 * `POST /tasks/:blocker/done` fires its `task.dependencies_resolved`, whose
 * delivery promotes the deferred intent and starts the agent exactly once; a
 * repeated done changes nothing; a blocked task between its Complete phases
 * when its blocker is done starts once its Complete ends. Also the route's
 * 404s. Both dialects.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { armFailpoint, disarmFailpoint } from '../../src/failpoints';
import { count, sql, useTestDb } from '../support/db';
import { useWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

async function call(method: 'GET' | 'POST', path: string, body?: unknown) {
  const res = await fetch(`${w.baseUrl}/api/v1${path}`, {
    method,
    headers: {
      authorization: `Bearer ${w.ws.token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function create(body: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await call('POST', '/tasks?wait_ms=30000', { workspace_id: w.ws.workspaceId, ...body });
  expect(res.status).toBe(200);
  return res.body.task;
}

describe('a deferred start', () => {
  it('starts its agent once, after its last blocker is marked done', async () => {
    const blocker = await create({ title: 'write the migration' });
    const blocked = await create({
      title: 'backfill the new column',
      blocked_by: [blocker.id],
      start_agent: true,
      agent_profile_id: w.ws.agentProfileId,
    });
    expect(blocked.start_policy).toBe('deferred');
    let detail = (await call('GET', `/tasks/${blocked.id}`)).body.task;
    expect(detail).toMatchObject({
      blocked_by: [blocker.id],
      blocked_by_open: [blocker.id],
      session: null,
      launch: null,
      lifecycle_state: 'live',
    });

    const done = await call('POST', `/tasks/${blocker.id}/done`);
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ already_done: false, dependencies_resolved: [blocked.id] });
    expect(done.body.task).toMatchObject({ id: blocker.id, lifecycle_state: 'done' });

    // This process runs the outbox and launch roles: the route woke the dispatcher, which delivered the event,
    // promoted the intent and started the agent before the answer (ADR 0007, ADR 0008).
    expect(
      await count(
        t.db,
        'event_outbox',
        "task_id = ? AND type = 'task.dependencies_resolved' AND delivered_at IS NOT NULL",
        [blocked.id],
      ),
    ).toBe(1);
    expect(await count(t.db, 'task_launch_dispatch_claims', "task_id = ? AND state = 'succeeded'", [blocked.id])).toBe(
      1,
    );
    const marker = join(w.ws.dataDir, 'tasks', blocked.id, 'agent-started.txt');
    await waitFor('the agent to write its file', async () =>
      existsSync(marker) && readFileSync(marker, 'utf8').trim() !== '' ? true : null,
    );
    expect(readFileSync(marker, 'utf8').trim()).toBe(blocked.id);
    detail = (await call('GET', `/tasks/${blocked.id}`)).body.task;
    expect(detail.session).toMatchObject({ state: 'running' });
    expect(detail).toMatchObject({ blocked_by: [blocker.id], blocked_by_open: [], revision: 2 });
    expect(detail.launch).toMatchObject({ state: 'succeeded' });

    const again = await call('POST', `/tasks/${blocker.id}/done`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ already_done: true, dependencies_resolved: [] });
    expect(await count(t.db, 'event_outbox', "type = 'task.dependencies_resolved' AND task_id = ?", [blocked.id])).toBe(
      1,
    );
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [blocked.id])).toBe(1);
    expect(await count(t.db, 'task_launch_dispatch_claims', 'task_id = ?', [blocked.id])).toBe(1);
  });

  it('a blocked task between its Complete phases when its blocker is done starts once its Complete ends', async () => {
    const blocker = await create({ title: 'cut the release branch' });
    // Hold the blocked task's Complete between its phases (creation_state completing) until the blocker is done.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const between = new Promise<void>((r) => (reached = r));
    armFailpoint(
      'between_complete_phase_a_and_b',
      {
        kind: 'call',
        fn: async () => {
          reached();
          await held;
        },
      },
      { times: 1 },
    );
    try {
      const creating = call('POST', '/tasks?wait_ms=30000', {
        workspace_id: w.ws.workspaceId,
        title: 'tag it',
        blocked_by: [blocker.id],
        start_agent: true,
        agent_profile_id: w.ws.agentProfileId,
      });
      await between;
      const done = await call('POST', `/tasks/${blocker.id}/done`);
      expect(done.body.dependencies_resolved).toEqual([]);
      expect(done.body.resolution_pending).toHaveLength(1);
      const blockedId = done.body.resolution_pending[0] as string;
      release();
      expect((await creating).status).toBe(200);
      await waitFor('the held task to start', async () =>
        (await count(t.db, 'task_launch_dispatch_claims', "task_id = ? AND state = 'succeeded'", [blockedId])) === 1
          ? true
          : null,
      );
      const events = await sql<{ type: string }>(t.db, 'SELECT type FROM event_outbox WHERE task_id = ? ORDER BY seq', [
        blockedId,
      ]);
      expect(events.map((e) => e.type)).toEqual(['task.created', 'task.dependencies_resolved']);
    } finally {
      release();
      disarmFailpoint('between_complete_phase_a_and_b');
    }
  });

  it('a task with no agent gets its event and nothing starts', async () => {
    const blocker = await create({ title: 'design' });
    const blocked = await create({ title: 'review', blocked_by: [blocker.id] });
    expect(blocked.start_policy).toBe('none');
    expect((await call('POST', `/tasks/${blocker.id}/done`)).body.dependencies_resolved).toEqual([blocked.id]);
    await waitFor('the event to be delivered', async () =>
      (await count(t.db, 'event_outbox', 'task_id = ? AND delivered_at IS NOT NULL', [blocked.id])) === 2 ? true : null,
    );
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [blocked.id])).toBe(0);
  });

  it('404 for a task that does not exist or is not a UUID', async () => {
    expect((await call('POST', '/tasks/00000000-0000-4000-8000-000000000000/done')).status).toBe(404);
    expect((await call('POST', '/tasks/not-a-task/done')).status).toBe(404);
  });
});
