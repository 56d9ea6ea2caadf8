/**
 * External-ID lookup and release over the API: 200/404/400 with
 * authorization before validation, the operator-only release (403 for
 * members), release then lookup 404 and a new create making a new task, and
 * the effects on the holder's operation (release_applied -> Complete reports
 * CreatedIdentityLost; a completed holder only loses the two columns; a
 * running step, a creation between Complete's phases or one already being
 * released makes the release wait with 409), and the recorded release as
 * `GET /creation-operations/:id` shows it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { bool } from '../../src/db/tx';
import { armFailpoint, disarmAll } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { retryPreparingRelease } from '../../src/runtime/release-recovery';
import { completeTaskCreation } from '../../src/store/complete';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { sql, useTestDb } from '../support/db';
import { begin, driveAllSteps, snapshot } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { call, useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t);
afterEach(() => disarmAll());

const lookupUrl = (ws: string, id: string) =>
  `/api/v1/workspaces/${ws}/tasks/by-external-id?external_id=${encodeURIComponent(id)}`;

async function holderColumns(taskId: string) {
  const rows = await sql<{ external_id: string | null; external_id_settled_at: Date | null; title: string }>(
    t.db,
    'SELECT external_id, external_id_settled_at, title FROM tasks WHERE id = ?',
    [taskId],
  );
  return rows[0];
}

describe('lookup', () => {
  it('200 with the task and creation_complete; 404 when no task holds the ID', async () => {
    const ws = await seedWorkspace(t.db);
    const created = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 't', external_id: 'Case-Sensitive ID' },
    });
    const found = await call(api.app, 'GET', lookupUrl(ws.workspaceId, '  Case-Sensitive ID  '), { token: ws.token });
    expect(found.status).toBe(200);
    expect(found.body.creation_complete).toBe(false);
    expect(found.body.task).toMatchObject({ id: created.body.task.id, external_id: 'Case-Sensitive ID' });
    const other = await call(api.app, 'GET', lookupUrl(ws.workspaceId, 'case-sensitive id'), { token: ws.token });
    expect(other.status).toBe(404);
  });

  it('400 for a malformed, empty or missing ID, and for an unknown parameter, once the workspace is authorized', async () => {
    const ws = await seedWorkspace(t.db);
    for (const query of [
      'external_id=a%07b',
      `external_id=${'x'.repeat(256)}`,
      'external_id=%20%20',
      '',
      'external_id=a&x=1',
    ]) {
      const res = await call(api.app, 'GET', `/api/v1/workspaces/${ws.workspaceId}/tasks/by-external-id?${query}`, {
        token: ws.token,
      });
      expect(res.status, query).toBe(400);
      expect(['invalid_external_id', 'invalid_request']).toContain(res.body.error);
    }
  });

  it('a caller of another workspace gets the same 404 for an existing, a missing and a malformed ID', async () => {
    const ws = await seedWorkspace(t.db);
    const outsider = await seedWorkspace(t.db);
    await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 't', external_id: 'exists' },
    });
    const answers = await Promise.all(
      ['exists', 'missing', 'bad\u0001id'].map((id) =>
        call(api.app, 'GET', lookupUrl(ws.workspaceId, id), { token: outsider.token }),
      ),
    );
    for (const a of answers) expect(a.status).toBe(404);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
  });
});

describe('release', () => {
  it('members get 403; an operator releases (204), lookup is then 404, and a new create makes a new task', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'abandoned', external_id: 'ticket-1' },
    });
    const url = lookupUrl(ws.workspaceId, 'ticket-1');
    expect((await call(api.app, 'DELETE', url, { token: ws.token })).status).toBe(403);
    expect((await holderColumns(first.body.task.id))!.external_id).toBe('ticket-1');

    const released = await call(api.app, 'DELETE', url, { token: api.adminToken });
    expect(released.status).toBe(204);
    expect(released.text).toBe('');
    expect((await call(api.app, 'GET', url, { token: ws.token })).status).toBe(404);
    expect((await call(api.app, 'DELETE', url, { token: api.adminToken })).status).toBe(404);
    expect(await holderColumns(first.body.task.id)).toEqual({
      external_id: null,
      external_id_settled_at: null,
      title: 'abandoned',
    });
    const op = await sql<{ release_applied: unknown; state: string }>(
      t.db,
      'SELECT release_applied, state FROM task_creation_operations WHERE id = ?',
      [first.body.operation_id],
    );
    expect(bool(op[0]!.release_applied)).toBe(true);
    expect(op[0]!.state).toBe('preparing');

    const again = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'replacement', external_id: 'ticket-1' },
    });
    expect(again.status).toBe(202);
    expect(again.body.task.id).not.toBe(first.body.task.id);
    const lookup = await call(api.app, 'GET', url, { token: ws.token });
    expect(lookup.body.task.id).toBe(again.body.task.id);
  });

  it('400 for a malformed ID and 404 for another workspace or a missing one', async () => {
    const ws = await seedWorkspace(t.db);
    const bad = await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, 'a\u0000'), { token: api.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('invalid_external_id');
    const missingWs = await call(api.app, 'DELETE', lookupUrl('00000000-0000-4000-8000-000000000000', 'x'), {
      token: api.adminToken,
    });
    expect(missingWs.status).toBe(404);
  });

  it('a preparing holder released before Complete completes as CreatedIdentityLost, with no ID in its event', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'lost-1' });
    expect((await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, 'lost-1'), { token: api.adminToken })).status).toBe(
      204,
    );
    const auth = { kind: 'handle' as const, handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    const done = await completeTaskCreation(t.db, auth);
    expect(done.outcome).toBe('CreatedIdentityLost');
    const events = await sql<{ payload_json: string }>(
      t.db,
      'SELECT payload_json FROM event_outbox WHERE task_id = ?',
      [res.task.id],
    );
    expect(JSON.parse(events[0]!.payload_json).external_id).toBeNull();
  });

  it('a completed holder loses only its ID; the operation keeps its Created outcome', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'done-1' });
    const auth = { kind: 'handle' as const, handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    await completeTaskCreation(t.db, auth);
    const settled = await call(api.app, 'GET', lookupUrl(ws.workspaceId, 'done-1'), { token: ws.token });
    expect(settled.body.creation_complete).toBe(true);
    expect((await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, 'done-1'), { token: api.adminToken })).status).toBe(
      204,
    );
    const op = await sql<{ release_applied: unknown; result_outcome: string }>(
      t.db,
      'SELECT release_applied, result_outcome FROM task_creation_operations WHERE id = ?',
      [res.operationId],
    );
    expect(bool(op[0]!.release_applied)).toBe(false);
    expect(op[0]!.result_outcome).toBe('Created');
    const cols = await holderColumns(res.task.id);
    expect(cols).toMatchObject({ external_id: null, external_id_settled_at: null });
  });

  it('409 while a step of the holder is running; nothing changes', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, {
      external_id: 'busy-1',
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    });
    const auth = { kind: 'handle' as const, handle: res.handle! };
    const rows = await sql<{ step_key: string }>(
      t.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'session_prepare'",
      [res.operationId],
    );
    await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: rows[0]!.step_key }, 'worker-1');
    const before = await snapshot(t.db, res.operationId, res.task.id);
    const refused = await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, 'busy-1'), { token: api.adminToken });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toBe('creation_state_conflict');
    expect(await snapshot(t.db, res.operationId, res.task.id)).toBe(before);
  });

  it("409 for a holder between Complete's phases and for one already being released; nothing changes", async () => {
    const ws = await seedWorkspace(t.db);
    const completing = await begin(t.db, ws, { external_id: 'busy-2' });
    const auth = { kind: 'handle' as const, handle: completing.handle! };
    await driveAllSteps(t.db, auth, completing.operationId, ws.dataDir);
    armFailpoint('between_complete_phase_a_and_b', { kind: 'throw' }, { times: 1 });
    await expect(completeTaskCreation(t.db, auth)).rejects.toThrow(/failpoint/);
    const releasing = await begin(t.db, ws, { external_id: 'busy-3' });
    armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
    expect((await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, 'busy-3'), { token: api.adminToken })).status).toBe(
      500,
    );
    for (const [res, id] of [
      [completing, 'busy-2'],
      [releasing, 'busy-3'],
    ] as const) {
      const before = await snapshot(t.db, res.operationId, res.task.id);
      const refused = await call(api.app, 'DELETE', lookupUrl(ws.workspaceId, id), { token: api.adminToken });
      expect(refused.status, id).toBe(409);
      expect(refused.body.error).toBe('creation_state_conflict');
      expect(await snapshot(t.db, res.operationId, res.task.id)).toBe(before);
    }
  });

  it('the release is a record: running while its holder is preparing-release (and still found), completed after', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'shown-1' });
    const url = lookupUrl(ws.workspaceId, 'shown-1');
    const opUrl = `/api/v1/creation-operations/${res.operationId}`;
    const none = await call(api.app, 'GET', opUrl, { token: ws.token });
    expect(none.body.release).toMatchObject({
      id: null,
      state: null,
      operation_id: null,
      generation: 0,
      applied: false,
    });

    armFailpoint('between_release_claim_and_apply', { kind: 'throw' }, { times: 1 });
    expect((await call(api.app, 'DELETE', url, { token: api.adminToken })).status).toBe(500);
    const claimed = await call(api.app, 'GET', opUrl, { token: ws.token });
    expect(claimed.body.state).toBe('preparing-release');
    const releaseId = claimed.body.release.id as string;
    expect(claimed.body.release).toMatchObject({
      id: releaseId,
      state: 'running',
      holder_state: 'preparing',
      requested_by: 'admin',
      completed_at: null,
      operation_id: releaseId,
      generation: 1,
      applied: false,
    });
    expect(claimed.body.release.requested_at).toEqual(expect.any(String));
    // Until the apply commits the holder keeps its ID: the lookup finds it, unsettled.
    const found = await call(api.app, 'GET', url, { token: ws.token });
    expect(found.status).toBe(200);
    expect(found.body).toMatchObject({ creation_complete: false, task: { id: res.task.id } });

    // The reaper's action is the Store's apply of that same release (test/runtime/release-recovery.test.ts).
    await retryPreparingRelease(t.db, silentLogger(), res.operationId);
    const done = await call(api.app, 'GET', opUrl, { token: ws.token });
    expect(done.body.state).toBe('preparing');
    expect(done.body.release).toMatchObject({ id: releaseId, state: 'completed', generation: 1, applied: true });
    expect(done.body.release.completed_at).toEqual(expect.any(String));
    expect((await call(api.app, 'GET', url, { token: ws.token })).status).toBe(404);
    expect((await call(api.app, 'DELETE', url, { token: api.adminToken })).status).toBe(404);
  });
});
