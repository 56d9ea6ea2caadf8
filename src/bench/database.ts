/**
 * The bench database: recreated and migrated per run, seeded through the
 * same setup writers the REST API uses (workspace, member token, workflow,
 * agent profile with the trivial command `true`, a workspace group and a
 * local Git repository), plus the server-side counters the report uses to
 * say how many transactions and statements one creation costs.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { recreateDatabase } from '../db/admin';
import { dialectOf, type Dialect } from '../db/config';
import { createDataSource } from '../db/data-source';
import { readRows, type Db } from '../db/tx';
import {
  createAgentProfile,
  createGroup,
  createRepository,
  createWorkflow,
  createWorkspace,
  issueToken,
} from '../setup';

const run = promisify(execFile);

export interface BenchDb {
  db: Db;
  url: string;
  dialect: Dialect;
  close(): Promise<void>;
}

/** Drops, recreates and migrates the bench database, then opens a small pool on it. */
export async function freshBenchDb(url: string): Promise<BenchDb> {
  const dialect = dialectOf(url);
  await recreateDatabase(url);
  const ds = createDataSource({ url, dialect }, { poolSize: 4 });
  await ds.initialize();
  await ds.runMigrations({ transaction: 'each' });
  const db: Db = { ds, dialect };
  return { db, url, dialect, close: () => ds.destroy() };
}

export async function serverVersion(db: Db): Promise<string> {
  const rows = await readRows<{ v: string }>(db, 'SELECT version() AS v');
  return String(rows[0]?.v ?? 'unknown');
}

export interface BenchWorld {
  workspaceId: string;
  token: string;
  tokenId: string;
  workflowStepId: string;
  agentProfileId: string;
  groupId: string;
  repositoryId: string;
  repoPath: string;
}

export async function makeGitRepo(parent: string = tmpdir()): Promise<string> {
  const dir = await mkdtemp(join(parent, 'taskledger-bench-repo-'));
  const git = (...args: string[]) => run('git', ['-C', dir, ...args]);
  await git('init', '-q', '-b', 'main');
  await git('config', 'user.email', 'bench@taskledger.invalid');
  await git('config', 'user.name', 'taskledger bench');
  await writeFile(join(dir, 'README.md'), '# taskledger bench repository\n');
  await git('add', 'README.md');
  await git('commit', '-q', '-m', 'initial');
  return dir;
}

/** One workspace with everything both creation shapes reference. */
export async function seedBenchWorld(db: Db, scratch: string): Promise<BenchWorld> {
  const ws = await createWorkspace(db, { name: 'bench' });
  const token = await issueToken(db, ws.id, { principal_id: 'bench' });
  const workflow = await createWorkflow(db, ws.id, { name: 'bench', steps: [{ name: 'todo' }] });
  // Launches happen after task.created; a trivial agent keeps them cheap.
  const profile = await createAgentProfile(db, ws.id, { name: 'noop', executor: { kind: 'local', command: ['true'] } });
  const group = await createGroup(db, ws.id, { name: 'bench' });
  const repoPath = await makeGitRepo(scratch);
  const repo = await createRepository(db, ws.id, { name: 'bench', path: repoPath, default_branch: 'main' });
  return {
    workspaceId: ws.id,
    token: token.token,
    tokenId: token.id,
    workflowStepId: workflow.steps[0]!.id,
    agentProfileId: profile.id,
    groupId: group.id,
    repositoryId: repo.id,
    repoPath,
  };
}

/**
 * Server counters, read before and after a run. PostgreSQL: commits of this
 * database (every autocommit statement is a transaction there too);
 * MySQL/MariaDB: server-wide statement and commit counters (other clients of
 * the same server are counted too).
 */
export interface ServerCounters {
  commits: number;
  statements: number | null;
  /** Deadlocks the server detected (each one restarts a transaction). */
  deadlocks: number;
}

export async function serverCounters(db: Db): Promise<ServerCounters> {
  if (db.dialect === 'postgres') {
    // Backends flush their statistics when idle or on exit: read this after the fleet stopped.
    const rows = await readRows<{ commits: string; deadlocks: string }>(
      db,
      'SELECT xact_commit AS commits, deadlocks FROM pg_stat_database WHERE datname = current_database()',
    );
    return { commits: Number(rows[0]?.commits ?? 0), statements: null, deadlocks: Number(rows[0]?.deadlocks ?? 0) };
  }
  const rows = await readRows<{ Variable_name: string; Value: string }>(
    db,
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Innodb_deadlocks')",
  );
  const get = (name: string) => Number(rows.find((r) => r.Variable_name === name)?.Value ?? 0);
  return { commits: get('Com_commit'), statements: get('Questions'), deadlocks: get('Innodb_deadlocks') };
}

/** `task.created` commit times (database clock, epoch ms) of the given tasks. */
export async function taskCreatedTimes(db: Db, taskIds: readonly string[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let i = 0; i < taskIds.length; i += 500) {
    const batch = taskIds.slice(i, i + 500);
    const rows = await readRows<{ task_id: string; created_at: Date | string }>(
      db,
      `SELECT task_id, created_at FROM event_outbox WHERE type = 'task.created' AND task_id IN (${batch.map(() => '?').join(', ')})`,
      batch,
    );
    for (const r of rows) out.set(r.task_id, new Date(r.created_at).getTime());
  }
  return out;
}
