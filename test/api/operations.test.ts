/**
 * Creation-operation reads, keyset pagination, operator step resolution, and
 * the delivered-events feed, over the real API and database.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { payloadHash } from '../../src/canonical/hash';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { failTaskCreationStep } from '../../src/store/step-results';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { sql, useTestDb } from '../support/db';
import { absentEvidence, ambiguousFailure } from '../support/evidence';
import { begin } from '../support/ledger';
import { seedWorkspace } from '../support/seed';
import { call, useTestApi } from './helpers';

const t = useTestDb();
const api = useTestApi(t);

describe('GET /creation-operations/:id', () => {
  it('shows plan, hashes and every step, never the completion token hash; 404 outside the workspace', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'op-1', start_agent: true, agent_profile_id: ws.agentProfileId });
    const stored = await sql<{ completion_token_sha256: string; manifest_hash: string }>(
      t.db,
      'SELECT completion_token_sha256, manifest_hash FROM task_creation_operations WHERE id = ?',
      [res.operationId],
    );
    const got = await call(api.app, 'GET', `/api/v1/creation-operations/${res.operationId}`, { token: ws.token });
    expect(got.status).toBe(200);
    expect(got.text).not.toContain(stored[0]!.completion_token_sha256);
    expect(got.text).not.toContain('completion_token');
    expect(got.text).not.toContain(res.handle!.completionToken);
    const op = got.body;
    expect(op).toMatchObject({
      id: res.operationId,
      task_id: res.task.id,
      workspace_id: ws.workspaceId,
      state: 'preparing',
      manifest_hash: stored[0]!.manifest_hash,
      actor_binding_hash: res.handle!.actorBindingHash,
      start_policy: 'immediate',
      release: { applied: false },
      recovery: { action: null },
    });
    expect(op.plan).toMatchObject({ version: 1, task_id: res.task.id, workspace_id: ws.workspaceId });
    expect(op.actor).toMatchObject({ principal_id: 'alice' });
    expect(op.steps.map((s: any) => s.kind).sort()).toEqual(['launch_intent', 'session_prepare']);
    for (const s of op.steps) {
      expect(Object.keys(s)).toEqual(
        expect.arrayContaining([
          'kind',
          'step_key',
          'state',
          'generation',
          'attempt',
          'request',
          'request_sha256',
          'idempotency_key',
          'evidence',
          'evidence_sha256',
          'disposition',
          'compensation_state',
          'cleanup_job_id',
          'error',
        ]),
      );
      expect(s).toMatchObject({ state: 'planned', generation: 0, evidence: null, error: null });
      expect(typeof s.request).toBe('object');
    }
    for (const [token, id] of [
      [other.token, res.operationId],
      [ws.token, randomUUID()],
      [ws.token, 'x'],
    ]) {
      expect((await call(api.app, 'GET', `/api/v1/creation-operations/${id}`, { token })).status).toBe(404);
    }
    expect(
      (await call(api.app, 'GET', `/api/v1/creation-operations/${res.operationId}`, { token: api.adminToken })).status,
    ).toBe(200);
  });
});

describe('GET /creation-operations', () => {
  it('lists newest first with an opaque keyset cursor, and filters by state and workspace', async () => {
    const ws = await seedWorkspace(t.db);
    for (let i = 0; i < 5; i++) await begin(t.db, ws, { title: `t${i}` });
    const expected = await sql<{ id: string }>(
      t.db,
      'SELECT id FROM task_creation_operations WHERE workspace_id = ? ORDER BY created_at DESC, id DESC',
      [ws.workspaceId],
    );
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = `workspace_id=${ws.workspaceId}&limit=2${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await call(api.app, 'GET', `/api/v1/creation-operations?${q}`, { token: api.adminToken });
      expect(page.status).toBe(200);
      expect(page.body.operations.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.operations.map((o: any) => o.id));
      cursor = page.body.next_cursor;
      pages++;
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual(expected.map((r) => r.id));

    const completed = await call(
      api.app,
      'GET',
      `/api/v1/creation-operations?workspace_id=${ws.workspaceId}&state=completed`,
      {
        token: api.adminToken,
      },
    );
    expect(completed.body).toEqual({ operations: [], next_cursor: null });
    const mine = await call(api.app, 'GET', '/api/v1/creation-operations?limit=200', { token: ws.token });
    expect(mine.body.operations).toHaveLength(5);
    expect(mine.body.operations.every((o: any) => o.workspace_id === ws.workspaceId)).toBe(true);
    const other = await seedWorkspace(t.db);
    const foreign = await call(api.app, 'GET', `/api/v1/creation-operations?workspace_id=${ws.workspaceId}`, {
      token: other.token,
    });
    expect(foreign.status).toBe(404);
    for (const q of ['cursor=not-a-cursor', 'limit=0', 'limit=201', 'state=sleeping', 'sort=asc']) {
      const bad = await call(api.app, 'GET', `/api/v1/creation-operations?${q}`, { token: api.adminToken });
      expect(bad.status, q).toBe(400);
      expect(bad.body.error).toBe('invalid_request');
    }
  });
});

describe('POST /creation-operations/:id/steps/:step_key/resolve', () => {
  it('an operator resolves an unknown step once a fresh observation agrees; members get 403; a running step is 409', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth = { kind: 'handle' as const, handle: res.handle! };
    const steps = await sql<{ step_key: string; kind: string }>(
      t.db,
      "SELECT step_key, kind FROM task_creation_steps WHERE operation_id = ? AND kind = 'session_prepare'",
      [res.operationId],
    );
    const key = steps[0]!.step_key;
    const url = `/api/v1/creation-operations/${res.operationId}/steps/${encodeURIComponent(key)}/resolve`;
    const claim = await claimTaskCreationStep(t.db, auth, { kind: 'session_prepare', stepKey: key }, 'w1');
    const proof = { resolution: 'retry_wait', evidence: absentEvidence(claim) };

    const early = await call(api.app, 'POST', url, { token: api.adminToken, body: { kind: 'session_prepare', proof } });
    expect(early.status).toBe(409);
    expect(early.body.error).toBe('creation_state_conflict');

    expect(await failTaskCreationStep(t.db, claim, ambiguousFailure())).toBe('unknown');
    const member = await call(api.app, 'POST', url, { token: ws.token, body: { kind: 'session_prepare', proof } });
    expect(member.status).toBe(403);
    const extra = await call(api.app, 'POST', url, {
      token: api.adminToken,
      body: { kind: 'session_prepare', proof: { ...proof, note: 'x' } },
    });
    expect(extra.status).toBe(400);
    expect(extra.body.detail.field).toBe('/proof/note');
    // The launch intent shares the session's key: it is planned, not unknown (409); an unknown step key is 404.
    const wrongKind = await call(api.app, 'POST', url, {
      token: api.adminToken,
      body: { kind: 'launch_intent', proof },
    });
    expect(wrongKind.status).toBe(409);
    expect(wrongKind.body.error).toBe('creation_state_conflict');
    const noStep = await call(api.app, 'POST', url.replace(encodeURIComponent(key), 'no-such-step'), {
      token: api.adminToken,
      body: { kind: 'session_prepare', proof },
    });
    expect(noStep.status).toBe(404);

    // The session rows do not exist: "succeeded" disagrees with what is observed, and nothing is written.
    const wrong = await call(api.app, 'POST', url, {
      token: api.adminToken,
      body: { kind: 'session_prepare', proof: { resolution: 'succeeded' } },
    });
    expect(wrong.status).toBe(409);
    expect(wrong.body).toMatchObject({
      error: 'observation_disagrees',
      detail: { needed: 'present_exact', observed: 'absent_proven' },
    });
    const still = await sql<{ state: string }>(
      t.db,
      "SELECT state FROM task_creation_steps WHERE operation_id = ? AND step_key = ? AND kind = 'session_prepare'",
      [res.operationId, key],
    );
    expect(still[0]!.state).toBe('unknown');

    const ok = await call(api.app, 'POST', url, { token: api.adminToken, body: { kind: 'session_prepare', proof } });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({
      operation_id: res.operationId,
      kind: 'session_prepare',
      step_key: key,
      state: 'retry_wait',
      observed: 'absent_proven',
    });
    const after = await call(api.app, 'GET', `/api/v1/creation-operations/${res.operationId}`, {
      token: api.adminToken,
    });
    const step = after.body.steps.find((s: any) => s.kind === 'session_prepare');
    expect(step).toMatchObject({ state: 'retry_wait', generation: 2, evidence: { effect: 'absent_proven' } });

    const missing = await call(api.app, 'POST', `/api/v1/creation-operations/${randomUUID()}/steps/x/resolve`, {
      token: api.adminToken,
      body: { kind: 'session_prepare', proof },
    });
    expect(missing.status).toBe(404);
  });
});

describe('an operator resolution is checked against a fresh observation', () => {
  it('refuses what the world contradicts (409, zero writes) and accepts what it proves', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { repositories: [{ repository_id: ws.repositoryId }] });
    const auth = { kind: 'handle' as const, handle: res.handle! };
    const [row] = await sql<{ step_key: string }>(
      t.db,
      "SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = 'fresh_branch_prepare'",
      [res.operationId],
    );
    const key = row!.step_key;
    // The worker created the worktree, then died before recording it; the step went unknown.
    const claim = await claimTaskCreationStep(t.db, auth, { kind: 'fresh_branch_prepare', stepKey: key }, 'w1');
    const effects = {
      db: t.db,
      dataDir: api.dataDir,
      providers: createProviderRegistry({ timeoutMs: 2000 }),
      log: silentLogger(),
      timeoutMs: 10_000,
    };
    armFailpoint('after_effect_before_record', { kind: 'throw' }, { times: 1 });
    await expect(
      defaultStepHandlers.fresh_branch_prepare.perform(effects, claim as never, async () => {}),
    ).rejects.toBeInstanceOf(FailpointError);
    disarmAll();
    expect(await failTaskCreationStep(t.db, claim, ambiguousFailure())).toBe('unknown');
    const url = `/api/v1/creation-operations/${res.operationId}/steps/${encodeURIComponent(key)}/resolve`;
    const resolve = (resolution: string) =>
      call(api.app, 'POST', url, {
        token: api.adminToken,
        body: { kind: 'fresh_branch_prepare', proof: { resolution } },
      });
    const stepNow = async () =>
      (
        await sql<{ state: string; generation: number | string }>(
          t.db,
          "SELECT state, generation FROM task_creation_steps WHERE operation_id = ? AND kind = 'fresh_branch_prepare'",
          [res.operationId],
        )
      ).map((r) => ({ state: r.state, generation: Number(r.generation) }))[0];
    const before = await stepNow();

    // "succeeded": the worktree exists but its rows were never recorded (a retry adopts it): refused.
    const early = await resolve('succeeded');
    expect(early.status).toBe(409);
    expect(early.body).toMatchObject({
      error: 'observation_disagrees',
      detail: { needed: 'present_exact', observed: 'absent_proven' },
    });

    // Someone committed in the worktree: it no longer is the step's effect, nor absent. "absent" would let a
    // retry add a second worktree beside it: refused, whichever absent resolution is asked for.
    const worktree = execFileSync('git', ['-C', ws.repoPath, 'worktree', 'list', '--porcelain'], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.startsWith('worktree '))
      .map((l) => l.slice('worktree '.length))
      .find((p) => p !== ws.repoPath && !p.endsWith(ws.repoPath))!;
    execFileSync('git', [
      '-C',
      worktree,
      '-c',
      'user.email=x@y',
      '-c',
      'user.name=x',
      'commit',
      '-q',
      '--allow-empty',
      '-m',
      'x',
    ]);
    for (const resolution of ['retry_wait', 'failed', 'succeeded']) {
      const refused = await resolve(resolution);
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ error: 'observation_disagrees', detail: { observed: 'conflict' } });
      expect(refused.body.detail.reason).toContain('worktree');
    }
    expect(await stepNow()).toEqual(before);

    // The operator removes it (worktree and branch): now absence is proven and the retry is accepted.
    execFileSync('git', ['-C', ws.repoPath, 'worktree', 'remove', '--force', worktree]);
    const branch = execFileSync('git', ['-C', ws.repoPath, 'branch', '--format=%(refname:short)'], { encoding: 'utf8' })
      .split('\n')
      .map((b) => b.trim())
      .filter((b) => b !== '' && b !== 'main');
    for (const b of branch) execFileSync('git', ['-C', ws.repoPath, 'branch', '-D', b], { stdio: 'pipe' });
    const ok = await resolve('retry_wait');
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ state: 'retry_wait', observed: 'absent_proven' });
    expect(await stepNow()).toEqual({ state: 'retry_wait', generation: before!.generation + 1 });
  });
});

describe('GET /workspaces/:id/events', () => {
  it('returns delivered events in sequence order and never skips past an undelivered one', async () => {
    const ws = await seedWorkspace(t.db);
    const other = await seedWorkspace(t.db);
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    const insert = async (workspaceId: string, delivered: boolean) => {
      const eventId = randomUUID();
      const payload = { type: 'task.created', event_id: eventId };
      await sql(
        t.db,
        `INSERT INTO event_outbox (event_id, workspace_id, task_id, revision, type, operation_id, payload_json, payload_sha256, created_at, delivered_at)
         VALUES (?, ?, ?, 1, 'task.created', ?, ?, ?, ${now}, ${delivered ? now : 'NULL'})`,
        [eventId, workspaceId, randomUUID(), randomUUID(), canonicalJson(payload), payloadHash(payload)],
      );
      return eventId;
    };
    const ids = [await insert(ws.workspaceId, true), await insert(other.workspaceId, true)];
    ids.push(
      await insert(ws.workspaceId, true),
      await insert(ws.workspaceId, false),
      await insert(ws.workspaceId, true),
    );
    const url = `/api/v1/workspaces/${ws.workspaceId}/events`;

    const first = await call(api.app, 'GET', url, { token: ws.token });
    expect(first.status).toBe(200);
    expect(first.body.events.map((e: any) => e.event_id)).toEqual([ids[0], ids[2]]);
    const [a, b] = first.body.events;
    expect(a.seq).toBeLessThan(b.seq);
    expect(a).toMatchObject({ type: 'task.created', revision: 1, payload: { event_id: ids[0] } });
    expect(a.delivered_at).not.toBeNull();
    expect(first.body.next_after).toBe(b.seq);

    const paged = await call(api.app, 'GET', `${url}?limit=1`, { token: ws.token });
    expect(paged.body.events.map((e: any) => e.event_id)).toEqual([ids[0]]);
    const waiting = await call(api.app, 'GET', `${url}?after=${b.seq}`, { token: ws.token });
    expect(waiting.body).toEqual({ events: [], next_after: b.seq });

    await sql(t.db, `UPDATE event_outbox SET delivered_at = ${now} WHERE event_id = ?`, [ids[3]!]);
    const rest = await call(api.app, 'GET', `${url}?after=${b.seq}`, { token: ws.token });
    expect(rest.body.events.map((e: any) => e.event_id)).toEqual([ids[3], ids[4]]);

    expect((await call(api.app, 'GET', url, { token: other.token })).status).toBe(404);
    expect((await call(api.app, 'GET', `${url}?after=-1`, { token: ws.token })).status).toBe(400);
    expect(
      (await call(api.app, 'GET', `/api/v1/workspaces/${randomUUID()}/events`, { token: api.adminToken })).status,
    ).toBe(404);
  });
});
