/**
 * Runs a real fleet in the test process: every role, its own BullMQ prefix
 * on the real Redis, the real database of the test project, the fake provider
 * server, and a workspace whose repository, connection, attachments and agent
 * profile are wired for real effects.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { canonicalJson } from '../../src/canonical/canonical-json';
import { configFromEnv, type AppConfig } from '../../src/app/config';
import { startFleet, type Fleet } from '../../src/fleet/fleet';
import type { Role } from '../../src/fleet/roles';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { deleteQueuePrefix } from '../../src/runtime/redis';
import { stagedAttachmentPath } from '../../src/storage/paths';
import type { Db } from '../../src/db/tx';
import { sql } from '../support/db';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

export interface FleetWorld {
  fleet: Fleet;
  provider: FakeProviderServer;
  ws: SeededWorkspace;
  config: AppConfig;
  baseUrl: string;
  attachmentId: string;
  stop(): Promise<void>;
}

export async function stageAttachment(db: Db, dataDir: string, workspaceId: string, content: string): Promise<string> {
  const id = randomUUID();
  const path = stagedAttachmentPath(dataDir, workspaceId, id);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, content);
  const now = db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
  await sql(
    db,
    `INSERT INTO task_message_attachments (id, workspace_id, owner_kind, staging_owner_id, content_sha256, size, storage_path, created_at, updated_at)
     VALUES (?, ?, 'staging', 'alice', ?, ?, ?, ${now}, ${now})`,
    [id, workspaceId, createHash('sha256').update(content).digest('hex'), Buffer.byteLength(content), path],
  );
  return id;
}

export async function startWorld(db: Db, roles?: Role[]): Promise<FleetWorld> {
  const ws = await seedWorkspace(db, { attachments: 0 });
  const provider = await startFakeProviderServer();
  provider.addPullRequest('acme/app', 42);
  await sql(db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', ['acme/app', ws.repositoryId]);
  await sql(db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [provider.githubBaseUrl, ws.connectionId]);
  await sql(db, 'UPDATE agent_profiles SET executor_json = ? WHERE id = ?', [
    canonicalJson({ kind: 'local', command: ['sh', '-c', 'echo "$TASKLEDGER_TASK_ID" > agent-started.txt'] }),
    ws.agentProfileId,
  ]);
  const attachmentId = await stageAttachment(db, ws.dataDir, ws.workspaceId, 'design notes for the agent\n');
  const config: AppConfig = {
    ...configFromEnv(),
    port: 0 as unknown as number,
    dataDir: ws.dataDir,
    queuePrefix: `tl-test-${randomUUID().slice(0, 8)}`,
    leaseMs: 10_000,
    sweepMs: 1_000,
    adminToken: 'test-admin-token',
  };
  const fleet = await startFleet({
    config,
    roles: roles ?? ['api', 'steps', 'complete', 'outbox', 'launch', 'reaper', 'admission'],
    log: silentLogger(),
    poolSize: 8,
    // Other test files share this database: this fleet's reaper sweeps only its own workspace.
    sweepWorkspaceId: ws.workspaceId,
  });
  const addr = fleet.api?.server.address();
  const baseUrl = addr && typeof addr === 'object' ? `http://127.0.0.1:${addr.port}` : '';
  return {
    fleet,
    provider,
    ws,
    config,
    baseUrl,
    attachmentId,
    async stop() {
      await fleet.stop();
      await provider.close();
      await deleteQueuePrefix(config.redisUrl, config.queuePrefix);
    },
  };
}

/** One world for the file: started before its tests (handed to `set`), stopped after them. */
export function useWorld(t: { readonly db: Db }, set: (w: FleetWorld) => void, roles?: Role[]): void {
  let world: FleetWorld | undefined;
  beforeAll(async () => {
    world = await startWorld(t.db, roles);
    set(world);
  });
  afterAll(async () => {
    await world?.stop();
  });
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | null | undefined | false>,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
