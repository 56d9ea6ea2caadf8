/**
 * POST /api/v1/tasks with a createTask built on the real Store (Begin only:
 * Created stays preparing and answers 202): external-ID retries, concurrent
 * creates over real HTTP, malformed and unknown input with nothing written,
 * wait_ms handling, and an unauthorized caller who learns nothing.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/tx';
import { count, sql, useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { call, http, useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t, { listen: true });

async function writes(db: Db, workspaceId: string): Promise<number[]> {
  return Promise.all(
    ['tasks', 'task_creation_operations', 'task_creation_steps', 'task_identities', 'event_outbox'].map((table) =>
      count(db, table, 'workspace_id = ?', [workspaceId]),
    ),
  );
}

describe('create', () => {
  it('answers 202 while preparing; a retry with the same external ID is 200 deduplicated, not complete', async () => {
    const ws = await seedWorkspace(t.db);
    const body = { workspace_id: ws.workspaceId, title: 'first', external_id: 'hook-1' };
    const first = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body });
    expect(first.status).toBe(202);
    expect(first.body).toMatchObject({ deduplicated: false, creation_complete: false });
    expect(first.body.task).toMatchObject({ title: 'first', external_id: 'hook-1', creation_state: 'preparing' });
    expect(first.body.operation_id).toBe(first.body.task.creation_operation_id);

    const retry = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body });
    expect(retry.status).toBe(200);
    expect(retry.body).toMatchObject({ deduplicated: true, creation_complete: false });
    expect(retry.body.task.id).toBe(first.body.task.id);
    expect(retry.body.task.external_id).toBe('hook-1');
    expect(retry.body.operation_id).toBe(first.body.operation_id);
  });

  it('a retry with a different payload returns the same task, unchanged', async () => {
    const ws = await seedWorkspace(t.db);
    const url = '/api/v1/tasks';
    const first = await call(api.app, 'POST', url, {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'original', external_id: 'job-9' },
    });
    const before = await writes(t.db, ws.workspaceId);
    const second = await call(api.app, 'POST', url, {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'changed', description: 'new', external_id: 'job-9' },
    });
    expect(second.status).toBe(200);
    expect(second.body.task).toMatchObject({ id: first.body.task.id, title: 'original', description: null });
    const rows = await sql<{ title: string }>(t.db, 'SELECT title FROM tasks WHERE id = ?', [first.body.task.id]);
    expect(rows[0]!.title).toBe('original');
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('two concurrent creates with one external ID over real HTTP make exactly one task', async () => {
    const ws = await seedWorkspace(t.db);
    const body = { workspace_id: ws.workspaceId, title: 'race', external_id: 'race-1' };
    const results = await Promise.all(
      Array.from({ length: 4 }, () => http(api, 'POST', '/api/v1/tasks', { token: ws.token, body })),
    );
    const ids = new Set(results.map((r) => r.body.task.id as string));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => r.status === 202)).toHaveLength(1);
    for (const r of results.filter((x) => x.status !== 202)) {
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ deduplicated: true, creation_complete: false });
    }
    expect(await writes(t.db, ws.workspaceId)).toEqual([1, 1, 0, 1, 0]);
  });

  it('malformed JSON is 400 on "/" and writes nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const before = await writes(t.db, ws.workspaceId);
    const res = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      raw: `{"workspace_id": "${ws.workspaceId}", "title": `,
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    expect(res.body.detail.field).toBe('/');
    expect(typeof res.body.detail.message).toBe('string');
    const poisoned = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      raw: `{"workspace_id": "${ws.workspaceId}", "title": "x", "__proto__": {"admin": true}}`,
    });
    expect(poisoned.status).toBe(400);
    expect(poisoned.body.detail.field).toBe('/');
    const text = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      raw: 'hello',
      contentType: 'text/plain',
    });
    expect(text.status).toBe(415);
    const notObject = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body: [1, 2] });
    expect(notObject.status).toBe(400);
    expect(notObject.body.detail.field).toBe('/');
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('an unknown or mistyped field is 400 naming the field, nothing written', async () => {
    const ws = await seedWorkspace(t.db);
    const before = await writes(t.db, ws.workspaceId);
    const unknown = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'x', colour: 'red' },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ error: 'invalid_request', detail: { field: '/colour' } });
    const mistyped = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 5 },
    });
    expect(mistyped.status).toBe(400);
    expect(mistyped.body.detail.field).toBe('/title');
    const badId = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'x', external_id: 'a\u0000b' },
    });
    expect(badId.status).toBe(400);
    expect(badId.body).toMatchObject({ error: 'invalid_external_id', detail: { field: '/external_id' } });
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('a caller of another workspace gets 404 "task not created" for an existing, a new and a malformed ID', async () => {
    const ws = await seedWorkspace(t.db);
    const outsider = await seedWorkspace(t.db);
    await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'mine', external_id: 'taken' },
    });
    const before = await writes(t.db, ws.workspaceId);
    const bodies = [
      { workspace_id: ws.workspaceId, title: 'x', external_id: 'taken' },
      { workspace_id: ws.workspaceId, title: 'x', external_id: 'fresh' },
      { workspace_id: ws.workspaceId, title: 'x', external_id: 'bad\u0007id' },
      { workspace_id: ws.workspaceId, title: 'x', external_id: 'y'.repeat(300), colour: 'red' },
      { workspace_id: randomUUID(), title: 'x', external_id: 'taken' },
      { workspace_id: 'not-a-uuid', title: 'x' },
    ];
    const answers = await Promise.all(
      bodies.map((body) => call(api.app, 'POST', '/api/v1/tasks', { token: outsider.token, body })),
    );
    for (const res of answers) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: 'task not created' });
    }
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
    expect(await writes(t.db, outsider.workspaceId)).toEqual([0, 0, 0, 0, 0]);
  });

  it('passes wait_ms (default 15000) and refuses a value outside 0..120000', async () => {
    const ws = await seedWorkspace(t.db);
    const body = { workspace_id: ws.workspaceId, title: 'w' };
    api.createCalls.length = 0;
    expect((await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body })).status).toBe(202);
    expect((await call(api.app, 'POST', '/api/v1/tasks?wait_ms=0', { token: ws.token, body })).status).toBe(202);
    expect((await call(api.app, 'POST', '/api/v1/tasks?wait_ms=120000', { token: ws.token, body })).status).toBe(202);
    expect(api.createCalls.map((c) => c.waitMs)).toEqual([15000, 0, 120000]);
    for (const q of ['wait_ms=-1', 'wait_ms=120001', 'wait_ms=abc', 'wait_ms=1.5', 'wait=5']) {
      const res = await call(api.app, 'POST', `/api/v1/tasks?${q}`, { token: ws.token, body });
      expect(res.status, q).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
    expect(api.createCalls).toHaveLength(3);
  });

  it('the admin token creates as the operator principal; no token is 401', async () => {
    const ws = await seedWorkspace(t.db);
    const body = { workspace_id: ws.workspaceId, title: 'by admin', external_id: 'adm' };
    const res = await http(api, 'POST', '/api/v1/tasks', { token: api.adminToken, body });
    expect(res.status).toBe(202);
    const op = await sql<{ actor_json: string }>(t.db, 'SELECT actor_json FROM task_creation_operations WHERE id = ?', [
      res.body.operation_id,
    ]);
    expect(JSON.parse(op[0]!.actor_json)).toMatchObject({ variant: 'operator', principal_id: 'admin' });
    const anon = await http(api, 'POST', '/api/v1/tasks', { body });
    expect(anon.status).toBe(401);
    expect(anon.body).toEqual({ error: 'unauthorized' });
  });

  it('GET /tasks/:id shows placement, blockers, session and launch; 404 while being created and outside the workspace', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    const blocker = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'blocker' },
    });
    // This API runs no workers: the blocker stays preparing, and an unsettled task cannot block (400).
    const early = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'blocked', blocked_by: [blocker.body.task.id] },
    });
    expect(early).toMatchObject({ status: 400, body: { detail: { field: '/blocked_by/0' } } });
    expect(
      (await http(api, 'GET', `/api/v1/tasks/${blocker.body.task.id as string}`, { token: ws.token })).status,
    ).toBe(404);
    // Settled by hand (no workers here), it blocks; the blocked task is only readable once it is created too.
    await sql(t.db, "UPDATE tasks SET creation_state = 'completed' WHERE id = ?", [blocker.body.task.id as string]);
    const res = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'blocked', blocked_by: [blocker.body.task.id] },
    });
    expect(res.status).toBe(202);
    const id = res.body.task.id as string;
    expect((await http(api, 'GET', `/api/v1/tasks/${id}`, { token: ws.token })).status).toBe(404);
    await sql(t.db, "UPDATE tasks SET creation_state = 'completed' WHERE id = ?", [id]);
    const got = await http(api, 'GET', `/api/v1/tasks/${id}`, { token: ws.token });
    expect(got.status).toBe(200);
    expect(got.body.task).toMatchObject({
      id,
      workspace_id: ws.workspaceId,
      creation_state: 'completed',
      creation_complete: true,
      workflow_step_id: ws.stepIds[0],
      wip_admitted: false,
      queued_for_step_id: null,
      lifecycle_state: 'live',
      session: null,
      launch: null,
    });
    // Blocker, session and dispatch rows are step and launch effects; none exist before they run.
    expect(got.body.task.blocked_by).toEqual([]);
    const opId = res.body.operation_id as string;
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    const sessionId = randomUUID();
    const h = 'a'.repeat(64);
    await sql(
      t.db,
      `INSERT INTO task_blockers (task_id, blocker_task_id, workspace_id, operation_id, step_id, created_at) VALUES (?, ?, ?, ?, ?, ${now})`,
      [id, blocker.body.task.id, ws.workspaceId, opId, randomUUID()],
    );
    await sql(
      t.db,
      `INSERT INTO task_sessions (id, task_id, workspace_id, environment_id, executor_id, executor_profile_id, agent_profile_id,
         launch_config_sha256, state, operation_id, step_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, 'local', 'local:p', ?, ?, 'prepared', ?, ?, ${now}, ${now})`,
      [sessionId, id, ws.workspaceId, randomUUID(), ws.agentProfileId, h, opId, randomUUID()],
    );
    await sql(
      t.db,
      `INSERT INTO task_launch_dispatch_claims (id, creation_operation_id, task_id, session_id, workspace_id, state, generation,
         lifecycle_generation, idempotency_key, request_sha256, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'planned', 0, 1, 'launch-key', ?, ${now}, ${now})`,
      [randomUUID(), opId, id, sessionId, ws.workspaceId, h],
    );
    const full = await call(api.app, 'GET', `/api/v1/tasks/${id}`, { token: api.adminToken });
    expect(full.body.task.blocked_by).toEqual([blocker.body.task.id]);
    expect(full.body.task.session).toMatchObject({ id: sessionId, state: 'prepared', executor_id: 'local' });
    expect(full.body.task.launch).toMatchObject({ session_id: sessionId, state: 'planned', generation: 0 });
    for (const [token, path] of [
      [other.token, `/api/v1/tasks/${id}`],
      [ws.token, `/api/v1/tasks/${randomUUID()}`],
      [ws.token, '/api/v1/tasks/nope'],
    ] as const) {
      const res404 = await call(api.app, 'GET', path, { token });
      expect(res404.status).toBe(404);
    }
  });
});
