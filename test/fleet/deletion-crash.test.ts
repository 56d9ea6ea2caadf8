/**
 * A workspace deletion whose cascade process dies mid-way (a real `taskledger
 * start` child exits at the failpoint between two creations, its Redis keys
 * are then wiped) is finished by a fresh process from the ledger alone: every
 * created task is deleted exactly once (one task.created, one task.deleted),
 * every cleanup job runs to the end, and no worktree, task branch or agent of
 * the workspace is left. Both dialects.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAILPOINT_EXIT_CODE } from '../../src/failpoints';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { readWorkspaceDeletion, requestWorkspaceDeletion } from '../../src/store/workspace-deletion';
import { verifyLedger } from '../../src/verify/run';
import { realDeps } from '../compensation/support';
import { count, sql, useTestDb } from '../support/db';
import {
  creationBody,
  exitOf,
  flushPrefix,
  registeredWorktrees,
  sigkill,
  spawnWorker,
  startCrashWorld,
  stopCrashWorld,
  taskBranches,
  ROLES,
  type CrashWorld,
} from './sigkill-support';

const t = useTestDb();
const CREATIONS = 4;
let w: CrashWorld | undefined;

beforeAll(async () => {
  w = await startCrashWorld(t.db, CREATIONS);
});
afterAll(async () => {
  await stopCrashWorld(w);
});

async function poll<T>(what: string, fn: () => Promise<T | null | false>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('a workspace deletion whose process dies mid-cascade', () => {
  it('is finished by a fresh process: each task deleted once, nothing left running or on disk', async () => {
    const world = w!;
    const fleet = spawnWorker(world, 'creator', { leaseMs: 8000, sweepMs: 500 });
    await fleet.ready;
    for (let i = 0; i < CREATIONS; i++) {
      const out = await world.createTask(world.ws.member, creationBody(world, i), { waitMs: 30_000 });
      expect(out.status).toBe('done');
    }
    await poll('every launch', async () =>
      (await count(t.db, 'task_launch_dispatch_claims', "workspace_id = ? AND state = 'succeeded'", [
        world.ws.workspaceId,
      ])) === CREATIONS
        ? true
        : null,
    );
    expect(registeredWorktrees(world.ws.repoPath)).toHaveLength(CREATIONS);
    await sigkill(fleet);

    const { deletion } = await requestWorkspaceDeletion(t.db, world.ws.workspaceId, 'root');
    const dying = spawnWorker(world, 'dying', {
      leaseMs: 8000,
      sweepMs: 300,
      failpoints: 'workspace_deletion_between_creations=exit',
      roles: ['reaper'],
    });
    expect(await exitOf(dying)).toBe(FAILPOINT_EXIT_CODE);
    const partial = (await readWorkspaceDeletion(t.db, deletion.id))!;
    expect(partial).toMatchObject({ state: 'running', counts: { deleted_tasks: 1 } });
    await flushPrefix(world);

    const fresh = spawnWorker(world, 'fresh', { leaseMs: 8000, sweepMs: 300, roles: [...ROLES, 'cleanup'] });
    await fresh.ready;
    const done = await poll('the deletion to complete', async () => {
      const d = await readWorkspaceDeletion(t.db, deletion.id);
      return d?.state === 'completed' ? d : null;
    });
    expect(done.counts).toMatchObject({ deleted_tasks: CREATIONS, aborted: 0, completed: 0 });
    await poll('every cleanup job', async () =>
      (await count(t.db, 'task_resource_cleanup_jobs', "workspace_id = ? AND state <> 'done'", [
        world.ws.workspaceId,
      ])) === 0
        ? true
        : null,
    );
    expect(registeredWorktrees(world.ws.repoPath)).toEqual([]);
    expect(taskBranches(world.ws.repoPath)).toEqual([]);
    const perTask = await sql<{ task_id: string; created: number | string; deleted: number | string }>(
      t.db,
      `SELECT task_id, SUM(CASE WHEN type = 'task.created' THEN 1 ELSE 0 END) AS created,
              SUM(CASE WHEN type = 'task.deleted' THEN 1 ELSE 0 END) AS deleted
         FROM event_outbox WHERE workspace_id = ? GROUP BY task_id`,
      [world.ws.workspaceId],
    );
    expect(perTask).toHaveLength(CREATIONS);
    for (const r of perTask) expect([Number(r.created), Number(r.deleted)]).toEqual([1, 1]);
    expect(await count(t.db, 'executors_running', 'workspace_id = ?', [world.ws.workspaceId])).toBe(0);
    const report = await verifyLedger(
      { db: t.db, effects: realDeps(t.db, world.ws.dataDir), handlers: defaultStepHandlers },
      { workspaceId: world.ws.workspaceId, observe: false, maxDrift: 50, pageSize: 50 },
    );
    expect(report.drift).toEqual([]);
    await sigkill(fresh);
  });
});
