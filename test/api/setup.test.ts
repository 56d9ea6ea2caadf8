/**
 * Setup routes over the real API and database: every writer, its closed-schema
 * 400s (unknown field, wrong type, not a Git repository), token issuance then
 * use, 401 without or with a bad token, the 403 policy for non-operators on
 * operator-only routes, and staged attachment uploads.
 */
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalJson, parseCanonical } from '../../src/canonical/canonical-json';
import { stagedAttachmentPath } from '../../src/storage/paths';
import { tokenSha256 } from '../../src/store/actor';
import { count, sql, useTestDb } from '../support/db';
import { makeGitRepo, seedWorkspace } from '../support/seed';
import { call, useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t);

async function newWorkspace(): Promise<string> {
  const res = await call(api.app, 'POST', '/api/v1/workspaces', { token: api.adminToken, body: { name: 'acme' } });
  expect(res.status).toBe(201);
  return res.body.id as string;
}

describe('authentication and the operator policy', () => {
  it('401 without a token, with an unknown token, or with a non-bearer scheme', async () => {
    for (const headers of [undefined, 'Bearer nope', `Basic ${api.adminToken}`, 'Bearer']) {
      const res = await api.app.inject({
        method: 'POST',
        url: '/api/v1/workspaces',
        headers: headers ? { authorization: headers } : {},
        payload: { name: 'x' },
      });
      expect(res.statusCode).toBe(401);
      expect(JSON.parse(res.body)).toEqual({ error: 'unauthorized' });
    }
  });

  it('a member token on an operator-only route is 403 before anything is read or validated', async () => {
    const ws = await seedWorkspace(t.db);
    // Other files share this database and create workspaces concurrently: count only what this request could write.
    const name = `mine-${randomUUID()}`;
    const named = async () => (await sql(t.db, 'SELECT id FROM workspaces WHERE name = ?', [name])).length;
    const groups = () => count(t.db, 'workspace_groups', 'workspace_id = ?', [ws.workspaceId]);
    const groupsBefore = await groups();
    const created = await call(api.app, 'POST', '/api/v1/workspaces', { token: ws.token, body: { name } });
    expect(created.status).toBe(403);
    expect(created.body.error).toBe('forbidden');
    // An invalid body or another workspace changes nothing: the token alone decides.
    const invalid = await call(api.app, 'POST', `/api/v1/workspaces/${randomUUID()}/groups`, {
      token: ws.token,
      body: { bogus: 1 },
    });
    expect(invalid.status).toBe(403);
    const own = await call(api.app, 'POST', `/api/v1/workspaces/${ws.workspaceId}/groups`, {
      token: ws.token,
      body: { name: 'g' },
    });
    expect(own.status).toBe(403);
    expect(await named()).toBe(0);
    expect(await groups()).toBe(groupsBefore);
  });

  it('issues a token once, stores only its SHA-256, and the token then works within its workspace only', async () => {
    const wsId = await newWorkspace();
    const other = await newWorkspace();
    const res = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/tokens`, {
      token: api.adminToken,
      body: { principal_id: 'bob' },
    });
    expect(res.status).toBe(201);
    const token = res.body.token as string;
    expect(Buffer.from(token, 'base64url')).toHaveLength(32);
    expect(res.body).toMatchObject({ principal_id: 'bob', role: 'member', workspace_id: wsId });
    const rows = await sql<Record<string, unknown>>(t.db, 'SELECT * FROM api_tokens WHERE id = ?', [res.body.id]);
    expect(rows[0]!.token_sha256).toBe(tokenSha256(token));
    expect(JSON.stringify(rows)).not.toContain(token);

    expect((await call(api.app, 'GET', `/api/v1/workspaces/${wsId}/events`, { token })).status).toBe(200);
    expect((await call(api.app, 'GET', `/api/v1/workspaces/${other}/events`, { token })).status).toBe(404);
    expect((await call(api.app, 'POST', '/api/v1/workspaces', { token, body: { name: 'n' } })).status).toBe(403);
  });

  it('an operator-role token covers every workspace and may run setup', async () => {
    const wsId = await newWorkspace();
    const res = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/tokens`, {
      token: api.adminToken,
      body: { principal_id: 'ops', role: 'operator' },
    });
    expect(res.status).toBe(201);
    expect(res.body.workspace_id).toBeNull();
    const made = await call(api.app, 'POST', '/api/v1/workspaces', { token: res.body.token, body: { name: 'by-ops' } });
    expect(made.status).toBe(201);
  });

  it('400 names the field for an unknown field, a wrong type, a bad role; 404 for a missing workspace', async () => {
    const wsId = await newWorkspace();
    const unknown = await call(api.app, 'POST', '/api/v1/workspaces', {
      token: api.adminToken,
      body: { name: 'x', colour: 'red' },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toEqual({ error: 'invalid_request', detail: { field: '/colour', message: 'unknown field' } });
    const wrongType = await call(api.app, 'POST', '/api/v1/workspaces', { token: api.adminToken, body: { name: 7 } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.detail.field).toBe('/name');
    const missing = await call(api.app, 'POST', '/api/v1/workspaces', { token: api.adminToken, body: {} });
    expect(missing.body.detail).toEqual({ field: '/name', message: 'is required' });
    const role = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/tokens`, {
      token: api.adminToken,
      body: { principal_id: 'x', role: 'root' },
    });
    expect(role.status).toBe(400);
    expect(role.body.detail.field).toBe('/role');
    for (const id of [randomUUID(), 'not-a-uuid']) {
      const res = await call(api.app, 'POST', `/api/v1/workspaces/${id}/groups`, {
        token: api.adminToken,
        body: { name: 'g' },
      });
      expect(res.status).toBe(404);
      expect(res.body.error).toBe('not_found');
    }
  });
});

describe('setup writers', () => {
  it('registers a local Git repository, refusing a non-repository path, a missing branch and a duplicate name', async () => {
    const wsId = await newWorkspace();
    const repo = makeGitRepo();
    const url = `/api/v1/workspaces/${wsId}/repositories`;
    const ok = await call(api.app, 'POST', url, {
      token: api.adminToken,
      body: { name: 'app', path: repo, default_branch: 'main', remote_slug: 'acme/app' },
    });
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({
      name: 'app',
      path: repo,
      default_branch: 'main',
      workspace_id: wsId,
      remote_slug: 'acme/app',
    });
    const rows = await sql<{ path: string; remote_slug: string | null }>(
      t.db,
      'SELECT path, remote_slug FROM repositories WHERE id = ?',
      [ok.body.id],
    );
    expect(rows[0]).toEqual({ path: repo, remote_slug: 'acme/app' });
    const noSlug = await call(api.app, 'POST', url, {
      token: api.adminToken,
      body: { name: 'local-only', path: repo, default_branch: 'main' },
    });
    expect(noSlug.body.remote_slug).toBeNull();

    const plainDir = mkdtempSync(join(tmpdir(), 'not-a-repo-'));
    const cases: [Record<string, unknown>, string][] = [
      [{ name: 'b', path: plainDir, default_branch: 'main' }, '/path'],
      [{ name: 'b', path: join(plainDir, 'missing'), default_branch: 'main' }, '/path'],
      [{ name: 'b', path: 'relative/dir', default_branch: 'main' }, '/path'],
      [{ name: 'b', path: repo, default_branch: 'no-such-branch' }, '/default_branch'],
      [{ name: 'b', path: repo, default_branch: '../etc' }, '/default_branch'],
      [{ name: 'app', path: repo, default_branch: 'main' }, '/name'],
      [{ name: 'b', path: repo }, '/default_branch'],
      [{ name: 'b', path: repo, default_branch: 'main', url: 'x' }, '/url'],
      [{ name: 'b', path: repo, default_branch: 'main', remote_slug: 'no-slash' }, '/remote_slug'],
    ];
    for (const [body, field] of cases) {
      const res = await call(api.app, 'POST', url, { token: api.adminToken, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.detail.field, JSON.stringify(body)).toBe(field);
    }
    expect(await count(t.db, 'repositories', 'workspace_id = ?', [wsId])).toBe(2);
  });

  it('creates a workflow whose steps keep their order; the first step is position 0', async () => {
    const wsId = await newWorkspace();
    const res = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/workflows`, {
      token: api.adminToken,
      body: {
        name: 'flow',
        steps: [
          { name: 'todo', wip_limit: 0, auto_start: false },
          { name: 'doing', wip_limit: 3, auto_start: true },
        ],
      },
    });
    expect(res.status).toBe(201);
    expect(res.body.steps.map((s: any) => [s.name, s.position, s.wip_limit, s.auto_start])).toEqual([
      ['todo', 0, 0, false],
      ['doing', 1, 3, true],
    ]);
    const rows = await sql<{ id: string; position: number }>(
      t.db,
      'SELECT id, position FROM workflow_steps WHERE workflow_id = ? ORDER BY position',
      [res.body.id],
    );
    expect(rows.map((r) => r.id)).toEqual(res.body.steps.map((s: any) => s.id));
    const bad = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/workflows`, {
      token: api.adminToken,
      body: { name: 'f', steps: [{ name: 's', wip_limit: -1 }] },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.detail.field).toBe('/steps/0/wip_limit');
    const empty = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/workflows`, {
      token: api.adminToken,
      body: { name: 'f', steps: [] },
    });
    expect(empty.body.detail.field).toBe('/steps');
  });

  it('stores an agent profile executor as canonical JSON', async () => {
    const wsId = await newWorkspace();
    const executor = { command: ['sh', '-c', 'echo hi'], kind: 'local' };
    const res = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/agent-profiles`, {
      token: api.adminToken,
      body: { name: 'echo', executor },
    });
    expect(res.status).toBe(201);
    const rows = await sql<{ executor_json: string; executor_kind: string }>(
      t.db,
      'SELECT executor_json, executor_kind FROM agent_profiles WHERE id = ?',
      [res.body.id],
    );
    expect(rows[0]!.executor_json).toBe(canonicalJson(executor));
    expect(parseCanonical(rows[0]!.executor_json)).toEqual(executor);
    expect(rows[0]!.executor_kind).toBe('local');
    for (const [body, field] of [
      [{ name: 'x', executor: { kind: 'docker', command: ['a'] } }, '/executor/kind'],
      [{ name: 'x', executor: { kind: 'local', command: ['a'], env: {} } }, '/executor/env'],
      [{ name: 'x', executor: { kind: 'local', command: [] } }, '/executor/command'],
    ] as const) {
      const bad = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/agent-profiles`, {
        token: api.adminToken,
        body,
      });
      expect(bad.status).toBe(400);
      expect(bad.body.detail.field).toBe(field);
    }
  });

  it('creates provider connections (never echoing the token), groups and shared environments', async () => {
    const wsId = await newWorkspace();
    const conn = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/provider-connections`, {
      token: api.adminToken,
      body: { provider: 'gitlab', base_url: 'https://gitlab.example.test', token: 'glpat-secret' },
    });
    expect(conn.status).toBe(201);
    expect(conn.text).not.toContain('glpat-secret');
    const badProvider = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/provider-connections`, {
      token: api.adminToken,
      body: { provider: 'bitbucket', base_url: 'https://x.test', token: 't' },
    });
    expect(badProvider.body.detail.field).toBe('/provider');

    const group = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/groups`, {
      token: api.adminToken,
      body: { name: 'squad' },
    });
    expect(group.status).toBe(201);
    expect(await count(t.db, 'workspace_groups', 'id = ? AND workspace_id = ?', [group.body.id, wsId])).toBe(1);

    const repo = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/repositories`, {
      token: api.adminToken,
      body: { name: 'r', path: makeGitRepo(), default_branch: 'main' },
    });
    const env = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/environments`, {
      token: api.adminToken,
      body: { name: 'shared', repository_ids: [repo.body.id] },
    });
    expect(env.status).toBe(201);
    const envRows = await sql<{ kind: string; task_id: string | null }>(
      t.db,
      'SELECT kind, task_id FROM task_environments WHERE id = ?',
      [env.body.id],
    );
    expect(envRows).toEqual([{ kind: 'shared', task_id: null }]);
    expect(await count(t.db, 'task_environment_repos', 'environment_id = ?', [env.body.id])).toBe(1);
    const unknownRepo = await call(api.app, 'POST', `/api/v1/workspaces/${wsId}/environments`, {
      token: api.adminToken,
      body: { name: 'e2', repository_ids: [randomUUID()] },
    });
    expect(unknownRepo.status).toBe(400);
    expect(unknownRepo.body.detail.field).toBe('/repository_ids/0');
    expect(await count(t.db, 'task_environments', 'workspace_id = ?', [wsId])).toBe(1);
  });
});

describe('attachments', () => {
  it('a member stages raw bytes: file first (temp then rename), then the staging row owned by the caller', async () => {
    const ws = await seedWorkspace(t.db);
    const bytes = Buffer.from('hello attachment\n');
    const res = await call(api.app, 'POST', `/api/v1/workspaces/${ws.workspaceId}/attachments`, {
      token: ws.token,
      raw: bytes,
      contentType: 'application/octet-stream',
    });
    expect(res.status).toBe(201);
    const sha = createHash('sha256').update(bytes).digest('hex');
    expect(res.body).toEqual({ attachment_id: res.body.attachment_id, content_sha256: sha, size: bytes.length });
    const path = stagedAttachmentPath(api.dataDir, ws.workspaceId, res.body.attachment_id);
    expect(readFileSync(path)).toEqual(bytes);
    const rows = await sql<Record<string, unknown>>(
      t.db,
      'SELECT owner_kind, staging_owner_id, content_sha256, size, storage_path FROM task_message_attachments WHERE id = ?',
      [res.body.attachment_id],
    );
    expect(rows[0]).toMatchObject({ owner_kind: 'staging', staging_owner_id: 'alice', content_sha256: sha });
    expect(Number(rows[0]!.size)).toBe(bytes.length);
    expect(rows[0]!.storage_path).toBe(path);

    // The staged attachment is accepted by a create request.
    const created = await call(api.app, 'POST', '/api/v1/tasks', {
      token: ws.token,
      body: { workspace_id: ws.workspaceId, title: 'with file', attachments: [res.body.attachment_id] },
    });
    expect(created.status).toBe(202);
  });

  it('refuses another workspace (404), a non-octet-stream body (415) and more than 25 MiB (413), writing nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    const url = `/api/v1/workspaces/${ws.workspaceId}/attachments`;
    const before = await count(t.db, 'task_message_attachments', 'workspace_id = ?', [ws.workspaceId]);
    const foreign = await call(api.app, 'POST', url, {
      token: other.token,
      raw: Buffer.from('x'),
      contentType: 'application/octet-stream',
    });
    expect(foreign.status).toBe(404);
    const json = await call(api.app, 'POST', url, { token: ws.token, body: { a: 1 } });
    expect(json.status).toBe(415);
    const big = await call(api.app, 'POST', url, {
      token: ws.token,
      raw: Buffer.alloc(25 * 1024 * 1024 + 1),
      contentType: 'application/octet-stream',
    });
    expect(big.status).toBe(413);
    expect(await count(t.db, 'task_message_attachments', 'workspace_id = ?', [ws.workspaceId])).toBe(before);
    expect(existsSync(join(api.dataDir, 'staging', other.workspaceId))).toBe(false);
  });
});
