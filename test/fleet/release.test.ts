/**
 * Complete after a manual external-ID release, end to end over REST against
 * a running fleet (spec: "Complete after manual ID release emits creation
 * without ID and returns CreatedIdentityLost"): a create is held preparing
 * right after Begin, an operator releases its ID (204), the create then
 * finishes as CreatedIdentityLost (200, no `external_id`, task.created
 * without it), and a new create with the same ID makes a new task. No
 * reaper runs, so nothing but the held request can wake the creation.
 * Both dialects.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { armFailpoint, disarmAll, failpointHits } from '../../src/failpoints';
import { sql, useTestDb } from '../support/db';
import { useWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world), ['api', 'steps', 'complete', 'outbox']);
afterEach(() => disarmAll());

async function request(method: string, path: string, token: string, body?: unknown) {
  const res = await fetch(`${w.baseUrl}/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as Record<string, any> | null };
}

describe('release of a preparing holder over REST', () => {
  it('the held create completes as CreatedIdentityLost without its ID; the ID then makes a new task', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    armFailpoint('after_begin_commit_before_enqueue', { kind: 'call', fn: () => gate }, { times: 1 });
    const create = (id: string) =>
      request('POST', '/tasks?wait_ms=20000', w.ws.token, {
        workspace_id: w.ws.workspaceId,
        title: 'released while preparing',
        external_id: id,
        repositories: [{ repository_id: w.ws.repositoryId }],
      });
    const held = create('rel-1');
    await waitFor('Begin to commit', async () => failpointHits('after_begin_commit_before_enqueue') === 1);

    const path = `/workspaces/${w.ws.workspaceId}/tasks/by-external-id?external_id=rel-1`;
    const found = await request('GET', path, w.ws.token);
    expect(found.body).toMatchObject({ creation_complete: false });
    const released = await request('DELETE', path, w.config.adminToken!);
    expect(released).toEqual({ status: 204, body: null });
    expect((await request('GET', path, w.ws.token)).status).toBe(404);

    open();
    const res = await held;
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ deduplicated: false, creation_complete: true, task: { id: found.body!.task.id } });
    expect(res.body!.task).not.toHaveProperty('external_id');
    const [op] = await sql<{ result_outcome: string }>(
      t.db,
      'SELECT result_outcome FROM task_creation_operations WHERE id = ?',
      [res.body!.operation_id],
    );
    expect(op!.result_outcome).toBe('CreatedIdentityLost');
    const [ev] = await sql<{ payload_json: string }>(
      t.db,
      "SELECT payload_json FROM event_outbox WHERE task_id = ? AND type = 'task.created'",
      [res.body!.task.id],
    );
    expect(JSON.parse(ev!.payload_json)).toMatchObject({ external_id: null, operation_id: res.body!.operation_id });
    const shown = await request('GET', `/creation-operations/${res.body!.operation_id}`, w.ws.token);
    expect(shown.body).toMatchObject({
      state: 'completed',
      release: { state: 'completed', holder_state: 'preparing', applied: true },
    });

    const again = await create('rel-1');
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ deduplicated: false, creation_complete: true, task: { external_id: 'rel-1' } });
    expect(again.body!.task.id).not.toBe(res.body!.task.id);
  });
});
