/**
 * The fleet as an operator deploys it: `pm2 start ecosystem.config.js` under
 * a real pm2 (a devDependency, its PM2_HOME a private temporary directory),
 * one process per role (two for steps), each running the built JavaScript in
 * dist/ through bin/taskledger.mjs, on this project's database and the real
 * Redis. A creation with every step kind, posted to the pm2 API process,
 * completes with exactly one `task.created`, carried out by the pm2 workers
 * alone (no other process consumes this world's private queue prefix). Then
 * `pm2 kill` stops the daemon and every process. Runs once per dialect.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apps } from '../../ecosystem.config.js';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { deleteQueuePrefix } from '../../src/runtime/redis';
import { count, sql, useTestDb } from '../support/db';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { stageAttachment, waitFor } from '../fleet/support';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PM2 = join(ROOT, 'node_modules', 'pm2', 'bin', 'pm2');
const SLUG = 'acme/app';

const t = useTestDb(2);
const pm2Home = mkdtempSync(join(tmpdir(), 'taskledger-pm2-'));
const prefix = `tl-pm2-${randomUUID().slice(0, 8)}`;
let ws: SeededWorkspace;
let provider: FakeProviderServer;
let attachmentId: string;
let env: NodeJS.ProcessEnv;
let baseUrl: string;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address();
      server.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

function pm2(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [PM2, ...args], { cwd: ROOT, env, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`pm2 ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

interface Pm2Process {
  name: string;
  pid: number;
  pm2_env: {
    status: string;
    pm_exec_path: string;
    args?: string[] | string;
    restart_time: number;
    pm_out_log_path: string;
  };
}

async function processes(): Promise<Pm2Process[]> {
  return JSON.parse(await pm2(['jlist'])) as Pm2Process[];
}

beforeAll(async () => {
  ws = await seedWorkspace(t.db, { attachments: 0 });
  provider = await startFakeProviderServer();
  provider.addPullRequest(SLUG, 42);
  await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', [SLUG, ws.repositoryId]);
  await sql(t.db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [
    provider.githubBaseUrl,
    ws.connectionId,
  ]);
  await sql(t.db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo "$TASKLEDGER_TASK_ID" > agent-started.txt'] }),
    ws.agentProfileId,
  ]);
  attachmentId = await stageAttachment(t.db, ws.dataDir, ws.workspaceId, 'notes for the pm2 fleet\n');
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  env = {
    ...process.env,
    PM2_HOME: pm2Home,
    TASKLEDGER_PORT: String(port),
    TASKLEDGER_DATA_DIR: ws.dataDir,
    TASKLEDGER_QUEUE_PREFIX: prefix,
    TASKLEDGER_LOG_LEVEL: 'info',
    // Other test files share this database: the pm2 reaper sweeps only this workspace.
    TASKLEDGER_SWEEP_WORKSPACE_ID: ws.workspaceId,
  };
  delete env.TASKLEDGER_FAILPOINTS;
  await pm2(['start', 'ecosystem.config.js']);
});

afterAll(async () => {
  // Stops every process of this private daemon, then the daemon itself.
  await pm2(['kill']).catch(() => undefined);
  await provider?.close();
  await deleteQueuePrefix(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379', prefix);
  rmSync(pm2Home, { recursive: true, force: true });
});

describe('the fleet under pm2 (ecosystem.config.js)', () => {
  it('runs one process per role from the built CLI, and they create a task end to end', async () => {
    // Every app of the process file is started: api, admission, steps x2, complete, outbox, launch, cleanup, reaper.
    const expected = apps.reduce((n, app) => n + ((app.instances as number | undefined) ?? 1), 0);
    const list = await processes();
    expect(list).toHaveLength(expected);
    for (const p of list) expect(p.pm2_env.pm_exec_path).toBe(join(ROOT, 'bin', 'taskledger.mjs'));

    await waitFor(
      'the pm2 API process to answer /readyz',
      async () => (await fetch(`${baseUrl}/readyz`).catch(() => null))?.ok,
      60_000,
    );
    // Each role process logged its own start, with its role.
    for (const app of apps) {
      const role = String(app.args).split(' ').pop()!;
      await waitFor(
        `${String(app.name)} to start`,
        async () => {
          const logs = (await processes()).filter((p) => p.name === app.name).map((p) => p.pm2_env.pm_out_log_path);
          return logs.length > 0 && logs.every((path) => startedWith(path, role));
        },
        60_000,
      );
    }

    const res = await fetch(`${baseUrl}/api/v1/tasks?wait_ms=30000`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ws.token}` },
      body: JSON.stringify({
        workspace_id: ws.workspaceId,
        title: 'Created by the pm2 fleet',
        start_agent: true,
        agent_profile_id: ws.agentProfileId,
        repositories: [{ repository_id: ws.repositoryId }],
        attachments: [attachmentId],
        contributions: [
          {
            provider: 'github',
            connection_id: ws.connectionId,
            repository_id: ws.repositoryId,
            contribution_kind: 'pull_request',
            contribution_id: '42',
          },
        ],
        workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
      }),
    });
    expect([200, 202]).toContain(res.status);
    const body = (await res.json()) as { task: { id: string }; operation_id: string };
    const taskId = body.task.id;

    const state = await waitFor(
      'the creation to complete',
      async () => {
        const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
          body.operation_id,
        ]);
        return op?.state === 'completed' || op?.state === 'aborted' ? op.state : null;
      },
      60_000,
    );
    expect(state).toBe('completed');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId])).toBe(1);
    // The agent started in the task's worktree, from the spawner helper dist/ ships beside the bundle.
    const [repo] = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT r.worktree_path FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id WHERE e.task_id = ?',
      [taskId],
    );
    const marker = join(repo!.worktree_path, 'agent-started.txt');
    // The shell creates the file before echo writes to it: wait for its content, not its existence.
    await waitFor(
      'the agent to write its file',
      async () => (existsSync(marker) && readFileSync(marker, 'utf8').trim() !== '' ? true : null),
      60_000,
    );
    expect(readFileSync(marker, 'utf8').trim()).toBe(taskId);

    // No process crashed and was restarted along the way.
    for (const p of await processes()) {
      expect(p.pm2_env.status).toBe('online');
      expect(p.pm2_env.restart_time).toBe(0);
    }
  });
});

/** True when the pm2 log file holds the fleet's start line naming exactly this role. */
function startedWith(logPath: string, role: string): boolean {
  let text: string;
  try {
    text = readFileSync(logPath, 'utf8');
  } catch {
    return false;
  }
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    const rec = JSON.parse(line) as { msg?: string; roles?: string[] };
    if (rec.msg === 'taskledger fleet started' && rec.roles?.length === 1 && rec.roles[0] === role) return true;
  }
  return false;
}
