/**
 * The `cleanup` fleet role: a fleet process running only that role picks
 * up a transferred effect through its repeatable BullMQ job and performs it
 * (here: the quarantine of a modified worktree), with no direct call.
 * Runs on PostgreSQL and MySQL/MariaDB, with the real Redis.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { configFromEnv } from '../../src/app/config';
import { runPendingCompensations } from '../../src/compensation/run';
import { startFleet } from '../../src/fleet/fleet';
import { silentLogger } from '../../src/log';
import { deleteQueuePrefix } from '../../src/runtime/redis';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { sql, useTestDb } from '../support/db';
import { cleanupJob, compensation, failedCreation, seeded } from '../compensation/support';

const t = useTestDb();
let provider: FakeProviderServer;
beforeAll(async () => {
  provider = await startFakeProviderServer();
});
afterAll(async () => {
  await provider?.close();
});

describe('the cleanup role', () => {
  it('performs a pending cleanup job from its repeatable sweep', async () => {
    const ws = await seeded(t.db, provider, 700);
    const c = await failedCreation(t.db, ws, ['fresh_branch_prepare'], 'attachment_claim', 700);
    const [row] = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE operation_id = ?',
      [c.operationId],
    );
    writeFileSync(join(row!.worktree_path, 'notes.txt'), 'work in progress\n');
    expect((await runPendingCompensations(c.deps, c.operationId, 'comp-1')).transferred).toBe(1);
    const jobId = (await compensation(t.db, c.step('fresh_branch_prepare').id)).jobId!;

    const config = {
      ...configFromEnv(),
      dataDir: ws.dataDir,
      queuePrefix: `tl-test-${randomUUID().slice(0, 8)}`,
      sweepMs: 200,
    };
    const fleet = await startFleet({
      config,
      roles: ['cleanup'],
      log: silentLogger(),
      poolSize: 2,
      sweepWorkspaceId: ws.workspaceId,
    });
    try {
      await vi.waitFor(
        async () => {
          expect((await cleanupJob(t.db, jobId))?.state).toBe('done');
        },
        { timeout: 30_000, interval: 100 },
      );
    } finally {
      await fleet.stop();
      await deleteQueuePrefix(config.redisUrl, config.queuePrefix);
    }
    expect(existsSync(row!.worktree_path)).toBe(false);
    expect(existsSync(join(ws.dataDir, 'quarantine', ws.workspaceId, jobId))).toBe(true);
  });
});
