/**
 * Begin's context from memory (ADR 0052): a request of the common shape whose
 * every reference this process read before sends its transaction alone, one
 * round trip, no read before it; and every remembered fact is checked by that
 * transaction, so a changed agent profile, a deleted group, a new default
 * placement, a workspace being deleted, a revoked token or one whose secret
 * changed answers exactly as a fresh read would, with nothing written by the
 * attempt that relied on memory. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import type { Db } from '../../src/db/tx';
import { tokenSha256 } from '../../src/store/actor';
import { BeginContextCache, contextCacheOf, contextCounts } from '../../src/store/begin-context-cache';
import { validateCreateRequest } from '../../src/plan/create-request';
import type { PlanContext } from '../../src/plan/build-plan';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips, sentStatements } from '../support/round-trips';
import { begin, creationWrites, expectTyped } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { call, useTestApi } from '../api/helpers';

const t = useTestDb();
const api = useTestApi(t);

afterEach(() => {
  vi.restoreAllMocks();
});

const writes = creationWrites;

/** The bench's shape: an agent started from a profile, the task in a shared group, the default placement. */
function agentInGroup(ws: SeededWorkspace, title = 'remembered') {
  return {
    title,
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
  };
}

async function planOf(db: Db, operationId: string): Promise<string> {
  const rows = await sql<{ plan_json: string }>(db, 'SELECT plan_json FROM task_creation_operations WHERE id = ?', [
    operationId,
  ]);
  return rows[0]!.plan_json;
}

/** The launch config hash the operation's plan binds (the profile's executor is in it). */
async function launchConfigOf(db: Db, operationId: string): Promise<string | undefined> {
  return /"launch_config_sha256":"([0-9a-f]{64})"/.exec(await planOf(db, operationId))?.[1];
}

/** Changes the agent profile's executor document (an operator's SQL); returns the sources counted so far. */
async function changeExecutor(db: Db, ws: SeededWorkspace) {
  const changed = canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo changed'] });
  await sql(db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [changed, ws.agentProfileId]);
  return contextCounts();
}

/** The plans counted since `then`, by source: [memory, stale, fresh]. */
function countedSince(then: ReturnType<typeof contextCounts>): number[] {
  const now = contextCounts();
  return [now.memory - then.memory, now.stale - then.stale, now.fresh - then.fresh];
}

const at = (db: Db, iso: string) =>
  db.dialect === 'postgres' ? `TIMESTAMPTZ '${iso}'` : `TIMESTAMP('${iso.replace('T', ' ').replace('Z', '')}')`;

describe('Begin from remembered context (ADR 0052)', () => {
  it('a request whose references were read before sends its transaction alone, with the context fence', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await begin(t.db, ws, agentInGroup(ws, 'fresh'));
    const trips = countRoundTrips(t.db);
    expect((await begin(t.db, ws, agentInGroup(ws, 'counted'))).outcome).toBe('Created');
    expect(trips.calls).toBe(1);
    vi.restoreAllMocks();
    const sent = sentStatements(t.db);
    const res = await begin(t.db, ws, agentInGroup(ws));
    vi.restoreAllMocks();
    expect(res.outcome).toBe('Created');
    // No read of the workspace, placement, group or profile before the transaction: the fence checks them in it.
    expect(sent.filter((s) => s.startsWith('SELECT id, executor_kind, executor_json FROM agent_profiles'))).toEqual([]);
    expect(sent.filter((s) => s.startsWith('SELECT state FROM workspaces WHERE id = ?'))).toEqual([]);
    expect(sent.filter((s) => s.includes('SELECT 1 AS fresh FROM workspaces'))).toHaveLength(1);
    // Planned as from fresh reads: the default placement, the group, the profile's executor.
    expect(res.task.workflow_step_id).toBe(ws.stepIds[0]);
    const plan = JSON.parse(await planOf(t.db, res.operationId)) as Record<string, unknown>;
    const fresh = JSON.parse(await planOf(t.db, first.operationId)) as Record<string, unknown>;
    for (const field of ['workflow_id', 'workflow_step_id', 'workspace_policy', 'start_policy']) {
      expect({ field, value: plan[field] }).toEqual({ field, value: fresh[field] });
    }
  });

  it('a changed agent profile is planned from a fresh read; the remembered attempt writes nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const before = await begin(t.db, ws, agentInGroup(ws, 'before'));
    const counted = await changeExecutor(t.db, ws);
    const trips = countRoundTrips(t.db);
    const res = await begin(t.db, ws, agentInGroup(ws, 'after'));
    // taskledger_begin_context_total: one attempt from memory found stale, then one plan from fresh reads.
    expect(countedSince(counted)).toEqual([0, 1, 1]);
    const now = contextCounts();
    // The transaction from memory and its ROLLBACK (its fence failed), then the fresh reads, then the transaction.
    expect(trips.calls).toBe(4);
    vi.restoreAllMocks();
    // The launch config binds the profile's executor: the new one's hash, not the remembered one's.
    const newConfig = await launchConfigOf(t.db, res.operationId);
    expect(newConfig).toMatch(/^[0-9a-f]{64}$/);
    expect(newConfig).not.toBe(await launchConfigOf(t.db, before.operationId));
    expect(await writes(t.db, ws.workspaceId)).toEqual([2, 2, 2 * (res.steps.length || 1), 2]);
    // Remembered again, as read: the next one goes in one round trip.
    const again = countRoundTrips(t.db);
    await begin(t.db, ws, agentInGroup(ws, 'remembered again'));
    expect(contextCounts().memory).toBe(now.memory + 1);
    // (A connection the pool opened meanwhile sets its session up first: not Begin's.)
    expect(again.texts.filter((text) => !/^SET /.test(text))).toHaveLength(1);
  });

  it('a deleted group is refused as unknown, with nothing written', async () => {
    const ws = await seedWorkspace(t.db);
    await begin(t.db, ws, agentInGroup(ws));
    const before = await writes(t.db, ws.workspaceId);
    await sql(t.db, 'DELETE FROM workspace_groups WHERE id = ?', [ws.groupId]);
    await expect(begin(t.db, ws, agentInGroup(ws))).rejects.toMatchObject({
      code: 'invalid_request',
      field: '/workspace_policy/group_id',
    });
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('a new default placement is taken at once', async () => {
    const ws = await seedWorkspace(t.db);
    const first = await begin(t.db, ws, { title: 'old default' });
    expect(first.task.workflow_step_id).toBe(ws.stepIds[0]);
    // An older workflow: its first step is now the workspace's default placement.
    const workflowId = randomUUID();
    const stepId = randomUUID();
    await sql(
      t.db,
      `INSERT INTO workflows (id, workspace_id, name, created_at) VALUES (?, ?, 'older', ${at(t.db, '2001-01-01T00:00:00Z')})`,
      [workflowId, ws.workspaceId],
    );
    await sql(
      t.db,
      `INSERT INTO workflow_steps (id, workflow_id, workspace_id, name, position, wip_limit, auto_start, created_at) VALUES (?, ?, ?, 'inbox', 0, 0, ?, ${at(t.db, '2001-01-01T00:00:00Z')})`,
      [stepId, workflowId, ws.workspaceId, false],
    );
    const res = await begin(t.db, ws, { title: 'new default' });
    expect(res.task.workflow_step_id).toBe(stepId);
    expect(res.task.workflow_id).toBe(workflowId);
  });

  it('a workspace being deleted answers not_authorized, with nothing written', async () => {
    const ws = await seedWorkspace(t.db);
    await begin(t.db, ws, agentInGroup(ws));
    const before = await writes(t.db, ws.workspaceId);
    await sql(t.db, "UPDATE workspaces SET state = 'deleting' WHERE id = ?", [ws.workspaceId]);
    await expectTyped(begin(t.db, ws, agentInGroup(ws)), 'not_authorized');
    expect(await writes(t.db, ws.workspaceId)).toEqual(before);
  });

  it('a revoked token, or one whose secret changed, is 401 and writes nothing', async () => {
    for (const change of ['revoke', 'rotate'] as const) {
      const ws = await seedWorkspace(t.db);
      const body = { workspace_id: ws.workspaceId, ...agentInGroup(ws) };
      const ok = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body });
      expect(ok.status).toBe(202);
      const trips = countRoundTrips(t.db);
      const remembered = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body });
      expect(remembered.status).toBe(202);
      // The token was not read again: its principal came from memory, and the transaction checked it.
      expect(trips.texts.filter((text) => text.includes(tokenSha256(ws.token)))).toHaveLength(1);
      expect(trips.texts[0]).toMatch(/SELECT 1 AS fresh FROM workspaces|EXECUTE/);
      vi.restoreAllMocks();
      const before = await writes(t.db, ws.workspaceId);
      if (change === 'revoke') {
        const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
        await sql(t.db, `UPDATE api_tokens SET revoked_at = ${now} WHERE id = ?`, [ws.member.authority_id]);
      } else {
        await sql(t.db, 'UPDATE api_tokens SET token_sha256 = ? WHERE id = ?', [
          tokenSha256(`rotated-${randomUUID()}`),
          ws.member.authority_id,
        ]);
      }
      const refused = await call(api.app, 'POST', '/api/v1/tasks', { token: ws.token, body });
      expect({ change, status: refused.status, body: refused.body }).toEqual({
        change,
        status: 401,
        body: { error: 'unauthorized' },
      });
      expect(await writes(t.db, ws.workspaceId)).toEqual(before);
    }
  });

  it('a request with an external ID is admitted and looked up afresh, then planned from memory', async () => {
    const ws = await seedWorkspace(t.db);
    await begin(t.db, ws, agentInGroup(ws, 'warm'));
    const counted = contextCounts();
    const sent = sentStatements(t.db);
    const res = await begin(t.db, ws, { ...agentInGroup(ws, 'webhook'), external_id: 'hook-1' });
    vi.restoreAllMocks();
    expect(res.outcome).toBe('Created');
    expect(contextCounts().memory).toBe(counted.memory + 1);
    // The caller's workspace and the ID's lookup are read (in that order); the profile is not: the fence checks it.
    const workspaceRead = sent.findIndex((s) => s.startsWith('SELECT state FROM workspaces WHERE id = ?'));
    const lookup = sent.findIndex((s) => /FROM tasks[\s\S]*external_id = \?/.test(s));
    expect(workspaceRead).toBeGreaterThanOrEqual(0);
    expect(lookup).toBeGreaterThan(workspaceRead);
    expect(sent.filter((s) => s.startsWith('SELECT id, executor_kind, executor_json FROM agent_profiles'))).toEqual([]);
    expect(sent.filter((s) => s.startsWith('SELECT 1 AS fresh FROM workspaces'))).toHaveLength(1);
    // The webhook retried: the one task, found; nothing planned.
    const again = await begin(t.db, ws, { ...agentInGroup(ws, 'webhook'), external_id: 'hook-1' });
    expect(again.outcome).toBe('FoundUnsettled');
    expect(again.task.id).toBe(res.task.id);
    expect(await count(t.db, 'tasks', 'workspace_id = ? AND external_id = ?', [ws.workspaceId, 'hook-1'])).toBe(1);
  });

  it('with an external ID, a changed profile or a deleted group answers as from fresh reads', async () => {
    const ws = await seedWorkspace(t.db);
    const before = await begin(t.db, ws, agentInGroup(ws, 'warm'));
    const counted = await changeExecutor(t.db, ws);
    const res = await begin(t.db, ws, { ...agentInGroup(ws, 'after'), external_id: 'hook-2' });
    expect(countedSince(counted)).toEqual([0, 1, 1]);
    const newConfig = await launchConfigOf(t.db, res.operationId);
    expect(newConfig).toMatch(/^[0-9a-f]{64}$/);
    expect(newConfig).not.toBe(await launchConfigOf(t.db, before.operationId));
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [ws.workspaceId])).toBe(2);

    const writesBefore = await writes(t.db, ws.workspaceId);
    await begin(t.db, ws, { ...agentInGroup(ws, 'remember'), external_id: 'hook-3' });
    const remembered = await writes(t.db, ws.workspaceId);
    expect(remembered[0]).toBe(writesBefore[0]! + 1);
    await sql(t.db, 'DELETE FROM workspace_groups WHERE id = ?', [ws.groupId]);
    await expect(begin(t.db, ws, { ...agentInGroup(ws, 'gone'), external_id: 'hook-4' })).rejects.toMatchObject({
      code: 'invalid_request',
      field: '/workspace_policy/group_id',
    });
    expect(await writes(t.db, ws.workspaceId)).toEqual(remembered);
  });

  it('holds at most its capacity of each kind, the least recently remembered going first', () => {
    const cache = new BeginContextCache(2);
    const principal = {
      variant: 'api_principal' as const,
      principal_id: 'p',
      authority_id: randomUUID(),
      authority_revision: 1,
      workspace_id: null,
    };
    const requests = [1, 2, 3].map(() => validateCreateRequest({ workspace_id: randomUUID(), title: 't' }));
    const base = { taskId: randomUUID(), dataDir: '/tmp', newId: randomUUID };
    for (const req of requests) {
      const ctx: PlanContext = {
        ...base,
        workspaceId: req.workspace_id,
        workflow: null,
        parent: null,
        environments: {},
        groups: [],
        repositories: {},
        attachments: {},
        agentProfile: null,
      };
      cache.remember(req, ctx, principal, null);
    }
    // Two kinds per request (the workspace and its placement), two of each kept.
    expect(cache.size).toBe(4);
    expect(cache.context(requests[0]!, principal, null, base)).toBeNull();
    expect(cache.context(requests[2]!, principal, null, base)?.ctx.workspaceId).toBe(requests[2]!.workspace_id);
    // A request of another shape is never answered from memory.
    expect(cache.context({ ...requests[2]!, parent_id: randomUUID() }, principal, null, base)).toBeNull();
    expect(contextCacheOf(t.db)).toBe(contextCacheOf(t.db));
  });
});
