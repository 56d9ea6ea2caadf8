/**
 * A crash-test world for real worker processes: a seeded workspace wired for
 * every step kind (local Git repository, fake provider with one pull request
 * and one staged attachment per creation, an agent profile), a private BullMQ
 * prefix on the shared Redis, and `taskledger start` child processes
 * configured for it (short lease and sweep, the reaper scoped to this
 * workspace, optional TASKLEDGER_FAILPOINTS). Creations go through the real
 * coordinator (`makeCreateTask`, Begin then wake-ups) in the test process.
 */
import { execFileSync } from 'node:child_process';
import { expect } from 'vitest';
import { randomUUID } from 'node:crypto';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { spawnRoleProcess, type BenchChild } from '../../src/bench/processes';
import { makeCreateTask } from '../../src/coordinator/create';
import type { CreateTaskFn } from '../../src/coordinator/create-task';
import { QueueSet } from '../../src/coordinator/queues';
import type { Db } from '../../src/db/tx';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createRedis } from '../../src/runtime/redis';
import { sql } from '../support/db';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { stageAttachment } from './support';

export const ROLES = ['steps', 'complete', 'outbox', 'launch', 'reaper'];
export const SLUG = 'acme/app';

export interface CrashWorld {
  db: Db;
  ws: SeededWorkspace;
  provider: FakeProviderServer;
  prefix: string;
  redis: ReturnType<typeof createRedis>;
  queues: QueueSet;
  createTask: CreateTaskFn;
  /** One staged attachment per creation, by creation index. */
  attachments: string[];
  children: BenchChild[];
}

export async function startCrashWorld(db: Db, creations: number): Promise<CrashWorld> {
  const ws = await seedWorkspace(db, { attachments: 0 });
  const provider = await startFakeProviderServer();
  for (let i = 0; i < creations; i++) provider.addPullRequest(SLUG, prNumber(i));
  await sql(db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', [SLUG, ws.repositoryId]);
  await sql(db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [provider.githubBaseUrl, ws.connectionId]);
  await sql(db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo "$TASKLEDGER_TASK_ID" > agent-started.txt'] }),
    ws.agentProfileId,
  ]);
  const attachments: string[] = [];
  for (let i = 0; i < creations; i++) {
    attachments.push(await stageAttachment(db, ws.dataDir, ws.workspaceId, `notes for creation ${i}\n`));
  }
  const prefix = `tl-sigkill-${randomUUID().slice(0, 8)}`;
  const redis = createRedis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379');
  const queues = new QueueSet(redis, prefix);
  const createTask = makeCreateTask({ db, queues, dataDir: ws.dataDir, metrics: null });
  return { db, ws, provider, prefix, redis, queues, createTask, attachments, children: [] };
}

export const prNumber = (i: number): number => 100 + i;

/** Creation `i`: every step kind (workspace attachment, attachment, worktree, provider link, session, launch). */
export function creationBody(w: CrashWorld, i: number): Record<string, unknown> {
  return {
    workspace_id: w.ws.workspaceId,
    title: `sigkill creation ${i}`,
    start_agent: true,
    agent_profile_id: w.ws.agentProfileId,
    repositories: [{ repository_id: w.ws.repositoryId }],
    attachments: [w.attachments[i]],
    contributions: [
      {
        provider: 'github',
        connection_id: w.ws.connectionId,
        repository_id: w.ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: String(prNumber(i)),
      },
    ],
    workspace_policy: { mode: 'shared_group', group_id: w.ws.groupId },
  };
}

export interface ChildOptions {
  leaseMs: number;
  sweepMs: number;
  failpoints?: string;
  /** Default ROLES. */
  roles?: string[];
  /** Extra environment (e.g. another database user, an application name, a port). */
  env?: NodeJS.ProcessEnv;
}

/** Starts `taskledger start --roles steps,complete,outbox,launch,reaper` for this world. */
export function spawnWorker(w: CrashWorld, name: string, opts: ChildOptions): BenchChild {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TASKLEDGER_QUEUE_PREFIX: w.prefix,
    TASKLEDGER_DATA_DIR: w.ws.dataDir,
    TASKLEDGER_LEASE_MS: String(opts.leaseMs),
    TASKLEDGER_SWEEP_MS: String(opts.sweepMs),
    TASKLEDGER_EFFECT_TIMEOUT_MS: '10000',
    // Other test files share this database: the children's reaper sweeps only this workspace.
    TASKLEDGER_SWEEP_WORKSPACE_ID: w.ws.workspaceId,
    TASKLEDGER_LOG_LEVEL: 'info',
    ...opts.env,
  };
  delete env.TASKLEDGER_FAILPOINTS;
  if (opts.failpoints !== undefined) env.TASKLEDGER_FAILPOINTS = opts.failpoints;
  const child = spawnRoleProcess(name, opts.roles ?? ROLES, env);
  w.children.push(child);
  return child;
}

export function exited(child: BenchChild): boolean {
  return child.process.exitCode !== null || child.process.signalCode !== null;
}

/**
 * Resolves with the exit code (or signal) once the child has exited and its
 * stdio has closed: `'exit'` can fire before the last stderr chunk arrives, and
 * tests read the child's final log line.
 */
export function exitOf(child: BenchChild): Promise<number | string> {
  const p = child.process;
  const closed = [p.stdout, p.stderr].every((stream) => stream === null || stream.destroyed);
  if (exited(child) && closed) return Promise.resolve(p.exitCode ?? p.signalCode ?? -1);
  return new Promise((resolve) => p.once('close', (code, signal) => resolve(code ?? signal ?? -1)));
}

/** SIGKILL: no `finally`, no graceful close; in-flight claims, jobs and locks are simply abandoned. */
export async function sigkill(child: BenchChild): Promise<void> {
  if (exited(child)) return;
  const done = exitOf(child);
  child.process.kill('SIGKILL');
  await done;
}

/** Forgets every BullMQ key of this world's prefix (never FLUSHALL: other tests share this Redis). */
export async function flushPrefix(w: CrashWorld): Promise<number> {
  let cursor = '0';
  let removed = 0;
  do {
    const [next, keys] = await w.redis.scan(cursor, 'MATCH', `${w.prefix}:*`, 'COUNT', 500);
    cursor = next;
    if (keys.length > 0) removed += await w.redis.del(...keys);
  } while (cursor !== '0');
  return removed;
}

/** Kills every child still running, flushes the prefix, closes the world (for afterAll, failure or not). */
export async function stopCrashWorld(w: CrashWorld | undefined): Promise<void> {
  if (!w) return;
  await Promise.all(w.children.map((c) => sigkill(c)));
  await w.queues.close().catch(() => undefined);
  await flushPrefix(w).catch(() => undefined);
  w.redis.disconnect();
  await w.provider.close();
}

/** Non-main worktrees registered in the repository: path and branch. */
export function registeredWorktrees(repoPath: string): { path: string; branch: string | null }[] {
  const out = execFileSync('git', ['-C', repoPath, 'worktree', 'list', '--porcelain']).toString();
  const blocks = out
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b !== '');
  return blocks
    .map((b) => {
      const path = /^worktree (.+)$/m.exec(b)?.[1] ?? '';
      const branch = /^branch refs\/heads\/(.+)$/m.exec(b)?.[1] ?? null;
      return { path, branch };
    })
    .filter((wt) => wt.path !== repoPath);
}

/** Local branches other than the default one. */
export function taskBranches(repoPath: string): string[] {
  return execFileSync('git', ['-C', repoPath, 'branch', '--format=%(refname:short)'])
    .toString()
    .split('\n')
    .map((s) => s.trim())
    .filter((s) => s !== '' && s !== 'main');
}

export function describeChild(child: BenchChild): string {
  return `${child.name} (pid ${child.pid}, exit ${child.process.exitCode ?? child.process.signalCode}):\n${child.tail.join('\n')}`;
}

/** Every step of each aborted operation: its effect undone (compensated or transferred) or never done. */
export async function expectAbortedUndone(db: Db, operationIds: readonly string[]): Promise<void> {
  for (const id of operationIds) {
    const steps = await sql<{ kind: string; state: string; compensation_state: string }>(
      db,
      'SELECT kind, state, compensation_state FROM task_creation_steps WHERE operation_id = ?',
      [id],
    );
    for (const s of steps) {
      const undone = ['compensated', 'transferred'].includes(s.compensation_state);
      const neverDone = ['failed', 'planned', 'retry_wait', 'cancelled'].includes(s.state);
      expect(undone || neverDone, `aborted ${id} ${s.kind} ${s.state}/${s.compensation_state}`).toBe(true);
    }
  }
}

export interface EnvRepoRow {
  task_id: string;
  worktree_path: string;
  branch: string;
}

/** The world's owners of effects: environment-repo rows with a worktree, and whether a cleanup job's proof names a resource. */
export async function ownersOf(w: CrashWorld): Promise<{ envRepos: EnvRepoRow[]; inCleanup: (s: string) => boolean }> {
  const envRepos = await sql<EnvRepoRow>(
    w.db,
    `SELECT e.task_id, r.worktree_path, r.branch FROM task_environment_repos r
       JOIN task_environments e ON e.id = r.environment_id
      WHERE r.workspace_id = ? AND r.worktree_path IS NOT NULL`,
    [w.ws.workspaceId],
  );
  const cleanup = await sql<{ proof_json: string }>(
    w.db,
    'SELECT proof_json FROM task_resource_cleanup_jobs WHERE workspace_id = ?',
    [w.ws.workspaceId],
  );
  return { envRepos, inCleanup: (s: string) => cleanup.some((c) => c.proof_json.includes(s)) };
}

/**
 * Worktrees and branches on disk: each belongs to a completed task's environment-repo row or to a cleanup job.
 * `explain` adds what is known about an unowned worktree to the failure.
 */
export async function expectDiskOwned(
  w: CrashWorld,
  completedTasks: ReadonlySet<string>,
  explain: (path: string) => Promise<string> = async () => '',
): Promise<void> {
  const { envRepos, inCleanup } = await ownersOf(w);
  const owned = envRepos.filter((r) => completedTasks.has(r.task_id));
  for (const wt of registeredWorktrees(w.ws.repoPath)) {
    const ok = owned.some((r) => r.worktree_path === wt.path) || inCleanup(wt.path);
    expect(ok, ok ? '' : `worktree ${wt.path} has no owner ${await explain(wt.path)}`).toBe(true);
  }
  for (const b of taskBranches(w.ws.repoPath)) {
    expect(owned.some((r) => r.branch === b) || inCleanup(b), `branch ${b} has an owner`).toBe(true);
  }
}
