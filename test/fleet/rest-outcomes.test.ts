/**
 * External-ID outcomes over REST against a running fleet, the admission
 * queue, and the no-leak rule for unauthorized callers. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { ADMISSION_QUEUE, type AdmissionJob } from '../../queues/names';
import { count, sql, useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { useWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

async function create(body: Record<string, unknown>, token = w.ws.token, query = '?wait_ms=20000') {
  const res = await fetch(`${w.baseUrl}/api/v1/tasks${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ workspace_id: w.ws.workspaceId, title: 'rest task', ...body }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe('external-ID outcomes over REST', () => {
  it('Created, then FoundSettled for a retry with a different payload (the found task is unchanged, nothing runs)', async () => {
    const first = await create({ external_id: 'ticket-1', start_agent: true, agent_profile_id: w.ws.agentProfileId });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ deduplicated: false, creation_complete: true });
    expect(first.body.task.external_id).toBe('ticket-1');
    const ops = await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId]);
    const retry = await create({
      external_id: 'ticket-1',
      title: 'other title',
      repositories: [{ repository_id: w.ws.repositoryId }],
    });
    expect(retry.status).toBe(200);
    expect(retry.body).toMatchObject({ deduplicated: true, creation_complete: true });
    expect(retry.body.task).toMatchObject({ id: first.body.task.id, title: 'rest task' });
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId])).toBe(ops);
  });

  it('202 while preparing at the deadline, FoundUnsettled for a retry before it completes', async () => {
    const slow = await create(
      { external_id: 'ticket-2', repositories: [{ repository_id: w.ws.repositoryId }] },
      w.ws.token,
      '?wait_ms=0',
    );
    expect(slow.status).toBe(202);
    expect(slow.body).toMatchObject({ creation_complete: false, deduplicated: false });
    const again = await create({ external_id: 'ticket-2' }, w.ws.token, '?wait_ms=0');
    if (again.body.creation_complete === false) {
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ deduplicated: true, creation_complete: false });
    } else {
      expect(again.body).toMatchObject({ deduplicated: true, creation_complete: true });
    }
    await waitFor('the creation to finish in the fleet', async () => {
      const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
        slow.body.operation_id,
      ]);
      return op?.state === 'completed';
    });
  });

  it('two concurrent creates with one external ID make exactly one task', async () => {
    const results = await Promise.all(
      [1, 2, 3].map(() =>
        create({ external_id: 'ticket-3', start_agent: true, agent_profile_id: w.ws.agentProfileId }),
      ),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(results.filter((r) => r.body.deduplicated === false)).toHaveLength(1);
    expect(new Set(results.map((r) => r.body.task.id)).size).toBe(1);
    expect(await count(t.db, 'tasks', 'workspace_id = ? AND external_id = ?', [w.ws.workspaceId, 'ticket-3'])).toBe(1);
    const taskId = results[0]!.body.task.id as string;
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId])).toBe(1);
  });

  it('a caller without access gets 404 task not created and learns nothing', async () => {
    const other = await seedWorkspace(t.db);
    for (const external_id of ['ticket-1', 'never-seen', 'bad\u0001id']) {
      const res = await create({ external_id }, other.token);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: 'task not created' });
    }
  });

  it('a provider that answers 500 gets a recorded step failure (retry_wait), and no association is left behind', async () => {
    w.provider.injectFault({ method: 'GET', path: /pulls\/42$/, fault: 500, times: 1000 });
    try {
      const res = await create(
        {
          external_id: 'ticket-500',
          contributions: [
            {
              provider: 'github',
              connection_id: w.ws.connectionId,
              repository_id: w.ws.repositoryId,
              contribution_kind: 'pull_request',
              contribution_id: '42',
            },
          ],
        },
        w.ws.token,
        '?wait_ms=0',
      );
      expect(res.status).toBe(202);
      const step = await waitFor('the step to record the provider failure', async () => {
        const rows = await sql<{ state: string; error_code: string | null; attempt: number }>(
          t.db,
          "SELECT state, error_code, attempt FROM task_creation_steps WHERE operation_id = ? AND kind = 'remote_contribution_associate'",
          [res.body.operation_id],
        );
        return rows[0]?.state === 'retry_wait' ? rows[0] : null;
      });
      expect(step.error_code).toBeTruthy();
      expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [res.body.task.id])).toBe(0);
      const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
        res.body.operation_id,
      ]);
      expect(op!.state).toBe('preparing');
    } finally {
      w.provider.clearFaults();
    }
  });
});

describe('admission queue', () => {
  it('a producer-enqueued creation request creates the task once, even when enqueued twice', async () => {
    const [token] = await sql<{ id: string }>(t.db, 'SELECT id FROM api_tokens WHERE workspace_id = ?', [
      w.ws.workspaceId,
    ]);
    const job: AdmissionJob = {
      tokenId: token!.id,
      body: { workspace_id: w.ws.workspaceId, title: 'from a webhook', external_id: 'queued-1' },
    };
    await w.fleet.queues.get(ADMISSION_QUEUE).add('create', job);
    await w.fleet.queues.get(ADMISSION_QUEUE).add('create', job);
    await waitFor('the queued creation to complete', async () => {
      const rows = await sql<{ creation_state: string }>(
        t.db,
        'SELECT creation_state FROM tasks WHERE workspace_id = ? AND external_id = ?',
        [w.ws.workspaceId, 'queued-1'],
      );
      return rows[0]?.creation_state === 'completed';
    });
    expect(await count(t.db, 'tasks', 'workspace_id = ? AND external_id = ?', [w.ws.workspaceId, 'queued-1'])).toBe(1);
  });
});
