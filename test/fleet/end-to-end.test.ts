/**
 * The main job end to end, over REST with a real fleet: a creation with every
 * step kind reaches `completed` with exactly one `task.created`, a real Git
 * worktree and branch, the provider association and its comment, the session,
 * and a launched agent that started after the event. Also: duplicate and
 * stale jobs change nothing. Both dialects.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { LAUNCH_QUEUE } from '../../queues/names';
import { processStepJob } from '../../src/coordinator/step-worker';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { count, sql, useTestDb } from '../support/db';
import { useWorld, waitFor, type FleetWorld } from './support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

async function post(path: string, body: unknown, token: string) {
  const res = await fetch(`${w.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

function fullBody(externalId: string) {
  return {
    workspace_id: w.ws.workspaceId,
    title: 'Fix the flaky build',
    external_id: externalId,
    start_agent: true,
    agent_profile_id: w.ws.agentProfileId,
    repositories: [{ repository_id: w.ws.repositoryId }],
    attachments: [w.attachmentId],
    contributions: [
      {
        provider: 'github',
        connection_id: w.ws.connectionId,
        repository_id: w.ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: '42',
      },
    ],
    workspace_policy: { mode: 'shared_group', group_id: w.ws.groupId },
  };
}

describe('a creation with every step kind', () => {
  it('completes with one task.created, real effects, and a launch after the event', async () => {
    const res = await post('/api/v1/tasks?wait_ms=30000', fullBody('gh-webhook-1'), w.ws.token);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ deduplicated: false, creation_complete: true });
    const taskId = res.body.task.id as string;
    const operationId = res.body.operation_id as string;

    const steps = await sql<{ kind: string; state: string }>(
      t.db,
      'SELECT kind, state FROM task_creation_steps WHERE operation_id = ? ORDER BY kind',
      [operationId],
    );
    expect(steps.map((s) => `${s.kind}:${s.state}`)).toEqual([
      'attachment_claim:succeeded',
      'fresh_branch_prepare:succeeded',
      'launch_intent:armed',
      'remote_contribution_associate:succeeded',
      'session_prepare:succeeded',
      'workspace_attachment:succeeded',
    ]);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId])).toBe(1);

    // Real Git worktree and branch at the base commit.
    const [repo] = await sql<{ worktree_path: string; branch: string; base_commit: string }>(
      t.db,
      `SELECT r.worktree_path, r.branch, r.base_commit FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id WHERE e.task_id = ?`,
      [taskId],
    );
    expect(existsSync(repo!.worktree_path)).toBe(true);
    const head = execFileSync('git', ['-C', repo!.worktree_path, 'rev-parse', 'HEAD']).toString().trim();
    expect(head).toBe(repo!.base_commit);
    const branches = execFileSync('git', ['-C', w.ws.repoPath, 'branch', '--list', repo!.branch]).toString();
    expect(branches).toContain(repo!.branch);
    const worktrees = execFileSync('git', ['-C', w.ws.repoPath, 'worktree', 'list', '--porcelain']).toString();
    expect(worktrees).toContain(repo!.worktree_path);

    // Provider association and exactly one linking comment.
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [taskId])).toBe(1);
    expect(w.provider.comments('acme/app', 42).filter((c) => c.body.includes(taskId))).toHaveLength(1);
    // Attachment claimed by the task; session prepared.
    const [att] = await sql<{ owner_kind: string; task_id: string }>(
      t.db,
      'SELECT owner_kind, task_id FROM task_message_attachments WHERE id = ?',
      [w.attachmentId],
    );
    expect(att).toMatchObject({ owner_kind: 'task', task_id: taskId });

    // The agent is launched after task.created, in the worktree.
    const runtime = await waitFor('the agent runtime', async () => {
      const rows = await sql<{ pid: number; started_at: Date }>(
        t.db,
        'SELECT pid, started_at FROM executors_running WHERE task_id = ?',
        [taskId],
      );
      return rows[0];
    });
    expect(Number(runtime.pid)).toBeGreaterThan(0);
    const [event] = await sql<{ created_at: Date }>(
      t.db,
      "SELECT created_at FROM event_outbox WHERE task_id = ? AND type = 'task.created'",
      [taskId],
    );
    const [claim] = await sql<{ created_at: Date; state: string }>(
      t.db,
      'SELECT created_at, state FROM task_launch_dispatch_claims WHERE task_id = ?',
      [taskId],
    );
    expect(claim!.state).toBe('succeeded');
    expect(new Date(claim!.created_at).getTime()).toBeGreaterThanOrEqual(new Date(event!.created_at).getTime());
    const marker = join(repo!.worktree_path, 'agent-started.txt');
    // The shell creates the file before echo writes to it: wait for its content, not its existence.
    await waitFor('the agent to write its file', async () =>
      existsSync(marker) && readFileSync(marker, 'utf8').trim() !== '' ? true : null,
    );
    expect(readFileSync(marker, 'utf8').trim()).toBe(taskId);
    const [session] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_sessions WHERE task_id = ?', [taskId]);
    expect(session!.state).toBe('running');
    // This fleet runs every role in one process: the delivery after Complete started the agent in place (ADR 0007),
    // so no launch job ever went through Redis (completed jobs are removed: the queue's event stream would show it).
    const launchQueue = w.fleet.queues.get(LAUNCH_QUEUE);
    const redis = (await launchQueue.client) as unknown as Redis;
    expect(await redis.xlen(launchQueue.keys.events!)).toBe(0);

    // The event is delivered and listed.
    await waitFor(
      'delivery',
      async () => (await count(t.db, 'event_outbox', 'task_id = ? AND delivered_at IS NOT NULL', [taskId])) === 1,
    );
    const events = await fetch(`${w.baseUrl}/api/v1/workspaces/${w.ws.workspaceId}/events`, {
      headers: { authorization: `Bearer ${w.ws.token}` },
    });
    const list = (await events.json()) as { events: { task_id: string; type: string }[] };
    expect(list.events.filter((e) => e.task_id === taskId && e.type === 'task.created')).toHaveLength(1);

    // A retry of the webhook finds the same settled task and runs nothing.
    const before = await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId]);
    const again = await post('/api/v1/tasks', { ...fullBody('gh-webhook-1'), title: 'changed payload' }, w.ws.token);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ deduplicated: true, creation_complete: true });
    expect(again.body.task.id).toBe(taskId);
    expect(again.body.task.title).toBe('Fix the flaky build');
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId])).toBe(before);
    expect(w.provider.comments('acme/app', 42).filter((c) => c.body.includes(taskId))).toHaveLength(1);
  });

  it('a step job delivered twice, or for a stale generation, changes nothing', async () => {
    const res = await post(
      '/api/v1/tasks?wait_ms=30000',
      { workspace_id: w.ws.workspaceId, title: 'db only', start_agent: true, agent_profile_id: w.ws.agentProfileId },
      w.ws.token,
    );
    expect(res.status).toBe(200);
    const operationId = res.body.operation_id as string;
    const [step] = await sql<{ id: string; step_key: string; generation: number; updated_at: Date }>(
      t.db,
      "SELECT id, step_key, generation, updated_at FROM task_creation_steps WHERE operation_id = ? AND kind = 'session_prepare'",
      [operationId],
    );
    const deps = {
      effects: {
        db: t.db,
        dataDir: w.config.dataDir,
        providers: {} as never,
        log: (await import('../../src/log')).silentLogger(),
        timeoutMs: 5000,
      },
      // The real handlers: session_prepare is a ledger-only kind, so this exercises its one-transaction claim.
      handlers: defaultStepHandlers,
      queues: w.fleet.queues,
      log: (await import('../../src/log')).silentLogger(),
      metrics: null,
      workerId: 'duplicate-test',
      leaseMs: 5000,
    };
    for (const generation of [0, Number(step!.generation)]) {
      const out = await processStepJob(
        deps,
        { operationId, stepId: step!.id, kind: 'session_prepare', stepKey: step!.step_key, generation },
        `dup-${generation}`,
      );
      expect(out).toBe('skipped');
    }
    const [after] = await sql<{ generation: number; updated_at: Date }>(
      t.db,
      'SELECT generation, updated_at FROM task_creation_steps WHERE id = ?',
      [step!.id],
    );
    expect(Number(after!.generation)).toBe(Number(step!.generation));
    expect(new Date(after!.updated_at).getTime()).toBe(new Date(step!.updated_at).getTime());
  });
});
