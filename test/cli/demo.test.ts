/**
 * `taskledger demo` as a newcomer runs it: the real bin/taskledger.mjs in a
 * child process on this project's (already migrated) database and the real
 * Redis, with its own queue prefix and data directory. The summary it prints
 * must agree with itself and with the ledger: the workspace exists, exactly
 * one `task.created` per completed task, a real worktree and a launched agent,
 * one task for the retried webhook, nothing written for refused requests.
 * Runs once per dialect.
 */
import { spawn, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/main';
import { verifyCommand } from '../../src/cli/verify';
import type { VerifyReport } from '../../src/verify/drift';
import { dbConfigFromEnv } from '../../src/db/config';
import { deleteQueuePrefix } from '../../src/runtime/redis';
import { count, sql, useTestDb } from '../support/db';
import { begin } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const BIN = fileURLToPath(new URL('../../bin/taskledger.mjs', import.meta.url));
const { dialect } = dbConfigFromEnv();
const redisUrl = process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `tl-demo-test-${randomUUID().slice(0, 8)}`;
const dataDir = mkdtempSync(join(tmpdir(), 'taskledger-demo-'));
const TASKS = 6;

const t = useTestDb(2);
let run: { code: number | null; stdout: string; stderr: string };

function runDemo(args: string[]): Promise<typeof run> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TASKLEDGER_QUEUE_PREFIX: prefix,
    TASKLEDGER_DATA_DIR: dataDir,
    TASKLEDGER_LOG_LEVEL: 'warn',
    // The demo's sweeps see only its own workspace (the first test below proves it); one sweep at start (BullMQ
    // runs a scheduler's first job at once) is all the demo needs.
    TASKLEDGER_SWEEP_MS: '600000',
  };
  // The demo must issue and print its own operator token.
  delete env.TASKLEDGER_ADMIN_TOKEN;
  delete env.TASKLEDGER_PORT;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'demo', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The number at the end of the summary row `    <label>   <n>`. */
function summaryCount(label: string): number {
  const m = new RegExp(`^ {4}${label.replace(/[()]/g, '\\$&')} +(\\d+)`, 'm').exec(run.stdout);
  if (!m) throw new Error(`no summary row "${label}" in:\n${run.stdout}`);
  return Number(m[1]);
}

function workspaceId(): string {
  const m = /^workspace: \S+ \(([0-9a-f-]{36})\)/m.exec(run.stdout);
  if (!m) throw new Error(`no workspace line in:\n${run.stdout}`);
  return m[1]!;
}

/** A creation of another workspace, stalled long enough that an unscoped sweep would resume it. */
let foreign: { operationId: string };

beforeAll(async () => {
  const ws = await seedWorkspace(t.db);
  const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
  const past = t.db.dialect === 'postgres' ? "now() - interval '10 minutes'" : 'NOW(3) - INTERVAL 10 MINUTE';
  await sql(t.db, `UPDATE task_creation_operations SET created_at = ${past}, updated_at = ${past} WHERE id = ?`, [
    res.operationId,
  ]);
  await sql(t.db, `UPDATE task_creation_steps SET created_at = ${past}, updated_at = ${past} WHERE operation_id = ?`, [
    res.operationId,
  ]);
  foreign = { operationId: res.operationId };
  run = await runDemo(['--tasks', String(TASKS), '--port', '0']);
}, 90_000);

afterAll(async () => {
  // The demo leaves its reaper scheduler and finished-job keys under its prefix.
  await deleteQueuePrefix(redisUrl, prefix);
  rmSync(dataDir, { recursive: true, force: true });
});

describe(`taskledger demo (${dialect})`, () => {
  it("never touches another workspace's operations: its sweeps see only the demo's own workspace", async () => {
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      foreign.operationId,
    ]);
    expect(op!.state).toBe('preparing');
    const steps = await sql<{ state: string; generation: number | string }>(
      t.db,
      'SELECT state, generation FROM task_creation_steps WHERE operation_id = ?',
      [foreign.operationId],
    );
    expect(steps.length).toBeGreaterThan(0);
    expect(steps.map((s) => [s.state, Number(s.generation)])).toEqual(steps.map(() => ['planned', 0]));
  });

  it('exits 0 after printing every stage and a self-consistent summary', () => {
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    for (const stage of [
      'database: ',
      'migrations: ',
      'redis: ',
      'fake provider: ',
      'fleet: ',
      'workspace: ',
      'tasks: ',
    ])
      expect(run.stdout).toMatch(new RegExp(`^${stage}`, 'm'));
    expect(run.stdout).toMatch(/stands in for GitHub .* and GitLab /);
    expect(run.stdout).toMatch(/^result: OK, every ordinary creation completed .*; the task lifecycle tour held$/m);

    // 6 ordinary creations (5 + the deferred one), 4 webhook deliveries, 4 fault requests.
    const answered = [
      'Created',
      'FoundSettled',
      'FoundUnsettled',
      'CreatedIdentityLost',
      'pending (202)',
      'aborted (422)',
      'rejected (4xx)',
      'errors',
    ].reduce((sum, label) => sum + summaryCount(label), 0);
    expect(answered).toBe(TASKS + 4 + 4);
    expect(run.stdout).toContain(`answers to ${answered} create requests`);
    expect(summaryCount('errors')).toBe(0);
    expect(summaryCount('rejected (4xx)')).toBe(2);
    // Three webhook retries find the first delivery's task.
    expect(summaryCount('FoundSettled') + summaryCount('FoundUnsettled')).toBe(3);
    expect(run.stdout).toMatch(/webhook, 4 deliveries of one external_id: 1 task; answers /);

    const completed = summaryCount('completed');
    expect(completed).toBeGreaterThanOrEqual(TASKS + 1);
    const events =
      /task\.created (\d+) delivered \/ (\d+) written, for (\d+) completed creations; 0 tasks with more than one/.exec(
        run.stdout,
      );
    expect(events, run.stdout).not.toBeNull();
    expect(Number(events![1])).toBeGreaterThanOrEqual(summaryCount('Created'));
    expect(Number(events![1])).toBe(completed);
    const launches = /dispatch claims succeeded (\d+) \/ (\d+) expected starts/.exec(run.stdout);
    expect(Number(launches![1])).toBeGreaterThanOrEqual(1);
    expect(launches![1]).toBe(launches![2]);
    // The blocker was marked done: the deferred task's agent started too.
    expect(run.stdout).toMatch(
      /deferred starts +1 .*POST \/tasks\/<blocker>\/done: 200, unblocked 1; task\.dependencies_resolved 1 delivered \/ 1 written \(1 for deferred starts, each to launch one agent\)/,
    );

    expect(run.stdout).toMatch(/^ {2}operator +token \S{43} /m);
    expect(run.stdout).toMatch(/^ {2}ledger view +http:\/\/127\.0\.0\.1:\d+\/admin\/ledger /m);
    expect(run.stdout).not.toContain('?token=');
    expect(run.stdout).toMatch(/creation-operations\?workspace_id=[0-9a-f-]{36}/);
    expect(run.stdout).toContain('taskledger start');
  });

  it("ran the task lifecycle tour: WIP queueing and promotion, a deletion, the workspace's deletion", async () => {
    expect(run.stdout).toMatch(
      /^ {2}WIP gate +3 tasks with agents into "doing" \(WIP limit 1\): 1 started, 2 queued$/m,
    );
    expect(run.stdout).toMatch(
      /^ {2}move +PATCH the running task to "done": 200, promoted 1 queued task, its agent started$/m,
    );
    expect(run.stdout).toMatch(
      /^ {2}delete +DELETE that task: 202 \(\d+ cleanup jobs\), promoted 1; GET it now: 404$/m,
    );
    const ws =
      /^ {2}workspace +DELETE \/workspaces\/([0-9a-f-]{36}): 202, deletion [0-9a-f-]{36} completed; deleted tasks 2,/m.exec(
        run.stdout,
      );
    expect(ws, run.stdout).not.toBeNull();
    expect(run.stdout).toMatch(/^ {2}left behind +agents running 0, worktrees on disk 0, task branches 0$/m);
    expect(await count(t.db, 'workspaces', "id = ? AND state = 'deleted'", [ws![1]!])).toBe(1);
    expect(await count(t.db, 'tasks', "workspace_id = ? AND lifecycle_state <> 'deleted'", [ws![1]!])).toBe(0);
    expect(await count(t.db, 'event_outbox', "workspace_id = ? AND type = 'task.deleted'", [ws![1]!])).toBe(3);
  });

  it('left the workspace in the ledger with exactly one task.created per completed task', async () => {
    const ws = workspaceId();
    expect(await count(t.db, 'workspaces', "id = ? AND state = 'active'", [ws])).toBe(1);
    const completed = await sql<{ id: string }>(
      t.db,
      "SELECT id FROM tasks WHERE workspace_id = ? AND creation_state = 'completed'",
      [ws],
    );
    expect(completed.length).toBe(summaryCount('completed'));
    const events = await sql<{ task_id: string; n: number | string }>(
      t.db,
      "SELECT task_id, COUNT(*) AS n FROM event_outbox WHERE workspace_id = ? AND type = 'task.created' GROUP BY task_id",
      [ws],
    );
    expect(events.every((e) => Number(e.n) === 1)).toBe(true);
    expect(events.map((e) => e.task_id).sort()).toEqual(completed.map((c) => c.id).sort());
    expect(
      await count(t.db, 'event_outbox', "workspace_id = ? AND type = 'task.created' AND delivered_at IS NULL", [ws]),
    ).toBe(0);
  });

  it('made one task for the retried webhook and wrote nothing for the refused requests', async () => {
    const ws = workspaceId();
    expect(await count(t.db, 'tasks', "workspace_id = ? AND external_id LIKE 'github-delivery-%'", [ws])).toBe(1);
    expect(await count(t.db, 'tasks', "workspace_id = ? AND title LIKE 'fault: a %'", [ws])).toBe(0);
    // The 404 PR's creation holds no contribution row.
    const [missing] = await sql<{ id: string }>(
      t.db,
      "SELECT creation_operation_id AS id FROM tasks WHERE workspace_id = ? AND title LIKE 'fault: PR #404%'",
      [ws],
    );
    if (missing)
      expect(await count(t.db, 'task_remote_contribution_associations', 'operation_id = ?', [missing.id])).toBe(0);
  });

  it('cut real worktrees on task branches and launched an agent that wrote its file', async () => {
    const ws = workspaceId();
    const trees = await sql<{ worktree_path: string; branch: string; task_id: string }>(
      t.db,
      `SELECT r.worktree_path, r.branch, e.task_id FROM task_environment_repos r
         JOIN task_environments e ON e.id = r.environment_id
        WHERE r.workspace_id = ? AND r.worktree_path IS NOT NULL`,
      [ws],
    );
    expect(trees.length).toBeGreaterThanOrEqual(1);
    for (const tree of trees) {
      expect(tree.worktree_path.startsWith(join(dataDir, 'worktrees', ws))).toBe(true);
      expect(existsSync(join(tree.worktree_path, 'README.md'))).toBe(true);
      const head = execFileSync('git', ['-C', tree.worktree_path, 'rev-parse', '--abbrev-ref', 'HEAD'])
        .toString()
        .trim();
      expect(head).toBe(tree.branch);
    }
    const launched = await sql<{ task_id: string }>(
      t.db,
      "SELECT task_id FROM task_launch_dispatch_claims WHERE workspace_id = ? AND state = 'succeeded'",
      [ws],
    );
    expect(launched.length).toBeGreaterThanOrEqual(1);
    const inTree = launched.find((l) => trees.some((tr) => tr.task_id === l.task_id));
    expect(inTree).toBeDefined();
    const tree = trees.find((tr) => tr.task_id === inTree!.task_id)!;
    const marker = readFileSync(join(tree.worktree_path, 'AGENT_STARTED.txt'), 'utf8');
    expect(marker.trim()).toBe(`agent for ${inTree!.task_id} started`);
  });

  it('left a ledger that taskledger verify proves: every hash re-derives, every invariant holds', async () => {
    const saved = process.env.TASKLEDGER_DATA_DIR;
    process.env.TASKLEDGER_DATA_DIR = dataDir;
    const out = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      const code = await verifyCommand(['--workspace', workspaceId(), '--json']);
      const report = JSON.parse(out.mock.calls.map((c) => c.join(' ')).join('\n')) as VerifyReport;
      expect(report.drift).toEqual([]);
      expect(code).toBe(0);
      expect(report.counts.operations).toBeGreaterThanOrEqual(TASKS);
      expect(report.counts.dispatch_claims).toBeGreaterThanOrEqual(1);
    } finally {
      vi.restoreAllMocks();
      if (saved === undefined) delete process.env.TASKLEDGER_DATA_DIR;
      else process.env.TASKLEDGER_DATA_DIR = saved;
    }
  });
});

/** Runs the dispatcher in this process (these paths stop before any database or Redis) and captures its output. */
async function runMain(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = vi.spyOn(console, 'log').mockImplementation(() => undefined);
  const err = vi.spyOn(console, 'error').mockImplementation(() => undefined);
  try {
    const code = await main(['node', 'taskledger', ...args]);
    const text = (spy: typeof out) => spy.mock.calls.map((c) => c.join(' ') + '\n').join('');
    return { code, stdout: text(out), stderr: text(err) };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

describe('taskledger demo refusals', () => {
  it('a taken port exits 1 and says so, before touching the database', async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as { port: number }).port;
    try {
      const res = await runMain(['demo', '--port', String(port)]);
      expect(res.code).toBe(1);
      expect(res.stdout).toBe('');
      expect(res.stderr).toContain(`port ${port} on 127.0.0.1 is already in use`);
      expect(res.stderr).toContain('--port 0');
    } finally {
      await new Promise<void>((resolve) => holder.close(() => resolve()));
    }
  });

  it('bad options exit 2 with usage', async () => {
    for (const args of [['--tasks', '0'], ['--tasks', 'many'], ['--port', '70000'], ['--frobnicate']]) {
      const res = await runMain(['demo', ...args]);
      expect(res.code).toBe(2);
      expect(res.stderr).toContain('usage: taskledger demo');
    }
  });
});
