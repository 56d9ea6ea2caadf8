/**
 * POST /api/v1/tasks reads the caller's token with Begin's first reads (ADR
 * 0025): the token, the workspace's state and the request's references share
 * one round trip; and an unknown or revoked token is still answered 401
 * before anything else about the request (a body, query or JSON Fastify
 * refuses, a foreign workspace, an unknown reference), with nothing written
 * and no Git process run for it.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { tokenSha256 } from '../../src/store/actor';
import { beginTaskCreation } from '../../src/store/begin';
import { sql, useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { creationWrites } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { call, useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t);

afterEach(() => {
  vi.restoreAllMocks();
});

const writes = creationWrites;

describe('POST /tasks reads the token with the request', () => {
  it('the token, the workspace state and the references go in one round trip; two in all before the answer', async () => {
    const ws = await seedWorkspace(t.db);
    // A first request opens the pool's connections (their session setup is a round trip of its own).
    await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'warm' },
    });
    const trips = countRoundTrips(t.db);
    const res = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'one trip', agent_profile_id: ws.agentProfileId },
    });
    expect(res.status).toBe(202);
    // Matched by value: a recurring statement travels as EXECUTE of a prepared one on PostgreSQL.
    const tokenRead = trips.texts.filter((text) => text.includes(tokenSha256(ws.token)));
    expect(tokenRead).toHaveLength(1);
    expect(tokenRead[0]).toContain(ws.workspaceId);
    expect(tokenRead[0]).toContain(ws.agentProfileId);
    // The reads (token with references), then Begin's one (ADR 0028).
    expect(trips.calls).toBe(2);
  });

  it('an unknown token is 401 before a bad body, query or JSON, a foreign workspace or an unknown reference', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    const before = await writes(t.db, ws.workspaceId);
    const unknown = 'no-such-token-' + randomUUID();
    const valid = { workspace_id: ws.workspaceId, title: 'nope' };
    const attempts: { url?: string; body?: unknown; raw?: string }[] = [
      { body: valid },
      { body: [1, 2] },
      { body: { workspace_id: ws.workspaceId, title: 42 } },
      { body: { workspace_id: ws.workspaceId, title: 'x', external_id: 'a\u0001b' } },
      { body: { workspace_id: 'not-a-uuid', title: 'x' } },
      { body: { workspace_id: other.workspaceId, title: 'x' } },
      { body: { workspace_id: ws.workspaceId, title: 'x', agent_profile_id: randomUUID() } },
      { url: '/api/v1/tasks?wait_ms=soon', body: valid },
      { raw: '{"workspace_id": ' },
    ];
    for (const a of attempts) {
      const res = await call(api.app, 'POST', a.url ?? '/api/v1/tasks', { token: unknown, body: a.body, raw: a.raw });
      expect({ attempt: a, status: res.status, body: res.body }).toEqual({
        attempt: a,
        status: 401,
        body: { error: 'unauthorized' },
      });
    }
    // The same requests with the member's token get their own answers: the 401s above were the token's.
    const bad = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body: { ...valid, title: 42 } });
    expect(bad.status).toBe(400);
    const badId = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { ...valid, external_id: 'a\u0001b' },
    });
    expect(badId.body.error).toBe('invalid_external_id');
    const foreign = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: other.workspaceId, title: 'x' },
    });
    expect(foreign.status).not.toBe(401);
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
    expect(api.createCalls.length).toBeGreaterThan(0);
  });

  it('a revoked token is 401 and writes nothing', async () => {
    const ws = await seedWorkspace(t.db);
    await sql(t.db, 'UPDATE api_tokens SET revoked_at = CURRENT_TIMESTAMP(3) WHERE token_sha256 = ?', [
      tokenSha256(ws.token),
    ]);
    const before = await writes(t.db, ws.workspaceId);
    const res = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'revoked' },
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: 'unauthorized' });
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('Begin runs no Git for a caller whose lookup fails, and reports the lookup failure first', async () => {
    const ws = await seedWorkspace(t.db);
    const resolveCommit = vi.fn(() => Promise.resolve('0'.repeat(40)));
    const refused = new Error('unknown token');
    const body = {
      workspace_id: ws.workspaceId,
      title: 'with a repository',
      repositories: [{ repository_id: ws.repositoryId }],
      agent_profile_id: randomUUID(),
    };
    await expect(
      beginTaskCreation(t.db, { lookup: () => Promise.reject(refused) }, body, { dataDir: ws.dataDir, resolveCommit }),
    ).rejects.toBe(refused);
    expect(resolveCommit).not.toHaveBeenCalled();
    // With the caller known, the same request runs Git and then reports its unknown agent profile.
    await expect(
      beginTaskCreation(t.db, { lookup: () => Promise.resolve(ws.member) }, body, {
        dataDir: ws.dataDir,
        resolveCommit,
      }),
    ).rejects.toMatchObject({ code: 'invalid_request', field: '/agent_profile_id' });
    expect(resolveCommit).toHaveBeenCalledTimes(1);
    expect(await writes(t.db, ws.workspaceId)).toEqual([0, 0, 0, 0]);
  });
});
