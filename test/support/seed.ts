/**
 * Seeds a fresh workspace with everything a creation can reference: an API
 * token (member principal), an operator principal, a workflow, an agent
 * profile, a real local Git repository, a group, a shared environment, staged
 * attachments and a provider connection. Every ID is random, so test files
 * running in parallel never collide.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { canonicalJson } from '../../src/canonical/canonical-json';
import type { Db } from '../../src/db/tx';
import { stagedAttachmentPath } from '../../src/storage/paths';
import { tokenSha256 } from '../../src/store/actor';
import type { Principal } from '../../src/store/types';
import { sql } from './db';

export interface SeededWorkspace {
  workspaceId: string;
  token: string;
  member: Principal;
  operator: Principal;
  workflowId: string;
  stepIds: string[];
  agentProfileId: string;
  repositoryId: string;
  repoPath: string;
  groupId: string;
  sharedEnvironmentId: string;
  connectionId: string;
  attachmentIds: string[];
  dataDir: string;
}

export function makeGitRepo(): string {
  const dir = mkdtempSync(join(tmpdir(), 'taskledger-repo-'));
  const git = (...args: string[]) => execFileSync('git', ['-C', dir, ...args], { stdio: 'pipe' });
  git('init', '-q', '-b', 'main');
  git('config', 'user.email', 'test@taskledger.invalid');
  git('config', 'user.name', 'taskledger test');
  writeFileSync(join(dir, 'README.md'), '# seeded\n');
  git('add', 'README.md');
  git('commit', '-q', '-m', 'initial');
  return dir;
}

const NOW = (db: Db) => (db.dialect === 'postgres' ? 'now()' : 'NOW(3)');

export async function seedWorkspace(db: Db, options: { attachments?: number } = {}): Promise<SeededWorkspace> {
  const workspaceId = randomUUID();
  const now = NOW(db);
  await sql(
    db,
    `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${now}, ${now})`,
    [workspaceId, `ws-${workspaceId.slice(0, 8)}`],
  );
  const token = randomBytes(24).toString('base64url');
  const tokenId = randomUUID();
  await sql(
    db,
    `INSERT INTO api_tokens (id, workspace_id, principal_id, role, token_sha256, revision, created_at) VALUES (?, ?, ?, 'member', ?, 1, ${now})`,
    [tokenId, workspaceId, 'alice', tokenSha256(token)],
  );
  const workflowId = randomUUID();
  await sql(db, `INSERT INTO workflows (id, workspace_id, name, created_at) VALUES (?, ?, 'default', ${now})`, [
    workflowId,
    workspaceId,
  ]);
  const stepIds = [randomUUID(), randomUUID()];
  for (const [i, id] of stepIds.entries()) {
    await sql(
      db,
      `INSERT INTO workflow_steps (id, workflow_id, workspace_id, name, position, wip_limit, auto_start, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ${now})`,
      [id, workflowId, workspaceId, i === 0 ? 'todo' : 'doing', i, i === 0 ? 0 : 2, i === 1],
    );
  }
  const agentProfileId = randomUUID();
  await sql(
    db,
    `INSERT INTO agent_profiles (id, workspace_id, name, executor_kind, executor_json, created_at) VALUES (?, ?, 'echo', 'local', ?, ${now})`,
    [agentProfileId, workspaceId, canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo hello'] })],
  );
  const repoPath = makeGitRepo();
  const repositoryId = randomUUID();
  await sql(
    db,
    `INSERT INTO repositories (id, workspace_id, name, path, default_branch, created_at) VALUES (?, ?, 'app', ?, 'main', ${now})`,
    [repositoryId, workspaceId, repoPath],
  );
  const groupId = randomUUID();
  await sql(db, `INSERT INTO workspace_groups (id, workspace_id, name, created_at) VALUES (?, ?, 'squad', ${now})`, [
    groupId,
    workspaceId,
  ]);
  const sharedEnvironmentId = randomUUID();
  await sql(
    db,
    `INSERT INTO task_environments (id, workspace_id, task_id, kind, operation_id, name, created_at) VALUES (?, ?, NULL, 'shared', NULL, 'shared', ${now})`,
    [sharedEnvironmentId, workspaceId],
  );
  await sql(
    db,
    `INSERT INTO task_environment_repos (id, environment_id, workspace_id, repository_id, created_at) VALUES (?, ?, ?, ?, ${now})`,
    [randomUUID(), sharedEnvironmentId, workspaceId, repositoryId],
  );
  const connectionId = randomUUID();
  await sql(
    db,
    `INSERT INTO provider_connections (id, workspace_id, provider, base_url, token, created_at) VALUES (?, ?, 'github', 'http://127.0.0.1:1', 'ghp_test', ${now})`,
    [connectionId, workspaceId],
  );
  // Each staged upload is a real file under the data directory, as an upload writes it (`verify` checks it exists).
  const dataDir = mkdtempSync(join(tmpdir(), 'taskledger-data-'));
  const attachmentIds: string[] = [];
  for (let i = 0; i < (options.attachments ?? 2); i++) {
    const id = randomUUID();
    attachmentIds.push(id);
    const bytes = Buffer.from(`staged-${i}`.padEnd(10 + i, '.'));
    const path = stagedAttachmentPath(dataDir, workspaceId, id);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, bytes);
    await sql(
      db,
      `INSERT INTO task_message_attachments (id, workspace_id, owner_kind, staging_owner_id, content_sha256, size, storage_path, created_at, updated_at)
       VALUES (?, ?, 'staging', 'alice', ?, ?, ?, ${now}, ${now})`,
      [id, workspaceId, createHash('sha256').update(bytes).digest('hex'), bytes.length, path],
    );
  }
  return {
    workspaceId,
    token,
    member: {
      variant: 'api_principal',
      principal_id: 'alice',
      authority_id: tokenId,
      authority_revision: 1,
      workspace_id: workspaceId,
    },
    operator: {
      variant: 'operator',
      principal_id: 'root',
      authority_id: 'bootstrap',
      authority_revision: 0,
      workspace_id: null,
    },
    workflowId,
    stepIds,
    agentProfileId,
    repositoryId,
    repoPath,
    groupId,
    sharedEnvironmentId,
    connectionId,
    attachmentIds: attachmentIds.sort(),
    dataDir,
  };
}
