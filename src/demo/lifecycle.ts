/**
 * The demo's second act: a task's life after creation, in a scratch
 * workspace of its own (the first workspace stays for exploring), all over
 * REST as a client would do it:
 * 1. three tasks whose agents keep running, each on a fresh branch and
 *    worktree, created into the `doing` step (WIP limit 1): one agent starts,
 *    two tasks wait in the step's queue;
 * 2. `PATCH /tasks/:id` moves the running one to `done`: its slot admits the
 *    oldest queued task, whose agent starts;
 * 3. `DELETE /tasks/:id` deletes that one: its agent stops, its worktree goes,
 *    and its slot admits the last queued task;
 * 4. `DELETE /workspaces/:id` (operator): the cascade deletes the rest; the
 *    demo waits for it and for its cleanup jobs, then counts what is left:
 *    no agent process, no worktree, no task branch.
 * Returns printable lines and the failures that make the demo exit 1.
 */
import { existsSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readRows, type Db } from '../db/tx';
import { findDispatchProcesses } from '../launch/dispatch-processes';
import type { FakeProviderServer } from '../providers/fake-server';
import { createAgentProfile } from '../setup/index';
import { createDemoWorkspace } from './setup';

const run = promisify(execFile);

/** A long-running agent: only deletion stops it. */
export const LONG_AGENT_COMMAND = [
  'sh',
  '-c',
  'echo "agent for $TASKLEDGER_TASK_ID started" > AGENT_STARTED.txt; exec sleep 600',
];
/** Why 30 s: every stage here ends in about a second; the bound only stops a broken run. */
const STAGE_TIMEOUT_MS = 30_000;

export interface LifecycleInput {
  db: Db;
  dataDir: string;
  provider: FakeProviderServer;
  /** `http://127.0.0.1:<port>/api/v1` */
  apiBase: string;
  /** The operator token (the configured admin token, or one the demo issued). */
  operatorToken: string | null;
  adminTokenConfigured: boolean;
  /** Scopes the fleet's reaper and cleanup sweeps to the tour's workspace (the demo's fleet sweeps one at a time). */
  sweep(workspaceId: string): void;
}

type Json = Record<string, unknown>;

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>): Promise<T> {
  const deadline = Date.now() + STAGE_TIMEOUT_MS;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function lifecycleTour(input: LifecycleInput): Promise<{ lines: string[]; failures: string[] }> {
  const lines: string[] = ['', "a task's life (a second workspace, so the first stays for exploring)"];
  const failures: string[] = [];
  const ws = await createDemoWorkspace({
    db: input.db,
    dataDir: input.dataDir,
    provider: input.provider,
    adminTokenConfigured: input.adminTokenConfigured,
    pullRequests: [],
    mergeRequests: [],
  });
  input.sweep(ws.id);
  const opToken = input.operatorToken ?? ws.operatorToken;
  const profile = await createAgentProfile(input.db, ws.id, {
    name: 'long-agent',
    executor: { kind: 'local', command: LONG_AGENT_COMMAND },
  });
  const [, doing, done] = ws.workflowStepIds as [string, string, string];
  const call = async (method: string, path: string, body?: unknown, token = ws.memberToken) => {
    const res = await fetch(`${input.apiBase}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Json };
  };
  const placement = async (id: string) => (await call('GET', `/tasks/${id}`)).body.task as Json;
  const launched = async (id: string) => (await placement(id)).launch_state === 'succeeded';

  const ids: string[] = [];
  for (const title of ['write the spec', 'build the parser', 'wire the CLI']) {
    const res = await call('POST', '/tasks?wait_ms=30000', {
      workspace_id: ws.id,
      title,
      workflow_step_id: doing,
      start_agent: true,
      agent_profile_id: profile.id,
      repositories: [{ repository_id: ws.app.id, fresh_branch: true }],
    });
    if (res.status !== 200) throw new Error(`creating "${title}" answered ${res.status}`);
    ids.push((res.body.task as Json).id as string);
  }
  const decided = await until('three launch decisions', async () => {
    const tasks = await Promise.all(ids.map(placement));
    return tasks.every((t) => t.launch_state === 'succeeded' || t.launch_state === 'queued') ? tasks : null;
  });
  const running = decided.filter((t) => t.launch_state === 'succeeded').map((t) => t.id as string);
  const queued = decided.filter((t) => t.launch_state === 'queued').map((t) => t.id as string);
  lines.push(
    `  WIP gate     3 tasks with agents into "doing" (WIP limit 1): ${running.length} started, ${queued.length} queued`,
  );
  if (running.length !== 1 || queued.length !== 2) failures.push('the WIP-1 step did not start exactly one of three');
  const worktrees = (
    await readRows<{ worktree_path: string; branch: string }>(
      input.db,
      'SELECT worktree_path, branch FROM task_environment_repos WHERE workspace_id = ? AND worktree_path IS NOT NULL',
      [ws.id],
    )
  ).map((r) => ({ path: r.worktree_path, branch: r.branch }));

  const moved = await call('PATCH', `/tasks/${running[0]}`, { workflow_step_id: done });
  const promoted = (moved.body.promoted ?? []) as string[];
  await until('the promoted agent to start', async () => promoted.length === 1 && (await launched(promoted[0]!)));
  lines.push(
    `  move         PATCH the running task to "done": ${moved.status}, promoted ${promoted.length} queued task, its agent started`,
  );
  if (promoted.length !== 1 || promoted[0] !== queued[0])
    failures.push('the move did not promote the oldest queued task');

  const deleted = await call('DELETE', `/tasks/${promoted[0]}`);
  const next = (deleted.body.promoted ?? []) as string[];
  await until('the next promoted agent to start', async () => next.length === 1 && (await launched(next[0]!)));
  const gone = await call('GET', `/tasks/${promoted[0]}`);
  lines.push(
    `  delete       DELETE that task: ${deleted.status} (${((deleted.body.cleanup_job_ids ?? []) as string[]).length} cleanup jobs), promoted ${next.length}; GET it now: ${gone.status}`,
  );
  if (deleted.status !== 202 || next.length !== 1 || gone.status !== 404) failures.push('the task deletion went wrong');

  const accepted = await call('DELETE', `/workspaces/${ws.id}`, undefined, opToken ?? '');
  if (accepted.status !== 202) throw new Error(`DELETE /workspaces answered ${accepted.status}`);
  const deletionId = accepted.body.deletion_operation_id as string;
  const status = await until('the workspace deletion', async () => {
    const r = await call('GET', `/workspace-deletions/${deletionId}`, undefined, opToken ?? '');
    return r.body.state === 'completed' ? r.body : null;
  });
  await until('the cleanup jobs', async () => {
    const [row] = await readRows<{ n: number | string }>(
      input.db,
      "SELECT COUNT(*) AS n FROM task_resource_cleanup_jobs WHERE workspace_id = ? AND state <> 'done'",
      [ws.id],
    );
    return Number(row?.n) === 0;
  });
  const keys = await readRows<{ idempotency_key: string }>(
    input.db,
    'SELECT idempotency_key FROM task_launch_dispatch_claims WHERE workspace_id = ?',
    [ws.id],
  );
  const agents = keys.reduce((n, k) => n + (findDispatchProcesses(k.idempotency_key)?.length ?? 0), 0);
  const onDisk = worktrees.filter((w) => existsSync(w.path)).length;
  const { stdout } = await run('git', ['-C', ws.app.path, 'branch', '--list', ...worktrees.map((w) => w.branch)]);
  const branches = stdout.split('\n').filter((l) => l.trim() !== '').length;
  const c = status.counts as Json;
  lines.push(
    `  workspace    DELETE /workspaces/${ws.id}: 202, deletion ${deletionId} ${String(status.state)}; ` +
      `deleted tasks ${Number(c.deleted_tasks)}, cancelled launches ${Number(c.cancelled_launches)}, ` +
      `transferred ${Number(c.transferred_launches)}, creations finished ${Number(c.completed)} / aborted ` +
      `${Number(c.aborted)}, cleanup jobs ${Number(c.cleanup_jobs)}`,
  );
  lines.push(`  left behind  agents running ${agents}, worktrees on disk ${onDisk}, task branches ${branches}`);
  if (agents + onDisk + branches > 0) failures.push('the workspace deletion left agents, worktrees or branches');
  return { lines, failures };
}
