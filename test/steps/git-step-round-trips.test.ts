/**
 * The round trips of a Git step's three transactions (ADR 0040), counted at
 * the driver on the real database: its claim of its own (the guard, then the
 * compare-and-set and the lease's read-back in COMMIT's round trip), the ownership
 * marker (the guard, the liveness fence with the marker's reading lock, the
 * INSERT with COMMIT) and the record (the guard, the reading locks with the
 * one read no lock answers, the INSERT with its read-back, the record with
 * COMMIT) — and that each leaves exactly the rows it did with a round trip
 * per statement. A stale claim is still refused by the marker's fence.
 * Runs on PostgreSQL and MySQL/MariaDB.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FreshBranchPrepareRequest } from '../../src/canonical/types';
import { persistWorktreeMarker, recordFreshBranch } from '../../src/kinds/fresh-branch-prepare/ledger';
import { resourceMarkerSha256 } from '../../src/store/effects/recording';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { count, sql, useTestDb } from '../support/db';
import { expectTyped, stepRows } from '../support/ledger';
import { countRoundTrips } from '../support/round-trips';
import { createTask, seedWithFiles, stepState } from './support';

const t = useTestDb();

afterEach(() => vi.restoreAllMocks());

async function claimed() {
  const { ws } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, { repositories: [{ repository_id: ws.repositoryId }] });
  const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!;
  // A warm pool: the first transaction on a new connection also sets its session up.
  await sql(t.db, 'SELECT 1');
  const trips = countRoundTrips(t.db);
  const claim = await claimTaskCreationStep(
    t.db,
    c.auth,
    { kind: 'fresh_branch_prepare', stepKey: row.step_key },
    'w1',
  );
  const claimTrips = [...trips.texts];
  vi.restoreAllMocks();
  const req = claim.request as FreshBranchPrepareRequest;
  const path = join(ws.dataDir, 'worktrees', ws.workspaceId, c.taskId, ws.repositoryId);
  return { ws, c, claim, req, path, claimTrips };
}

describe('a Git step in few round trips', () => {
  it('claims with its compare-and-set and lease read-back in the round trip of COMMIT', async () => {
    const s = await claimed();
    // The guard's round trips come first (one with Begin's hint, as a worker has it); the claim's writes only last.
    const writing = s.claimTrips.filter((text) => /UPDATE task_creation_steps/.test(text));
    expect(writing).toHaveLength(1);
    expect(s.claimTrips.at(-1)).toBe(writing[0]);
    expect(writing[0]).toMatch(/SELECT lease_expires_at FROM task_creation_steps[\s\S]*COMMIT/);
    expect(s.claim.leaseExpiresAt).toBeInstanceOf(Date);
    const [row] = await sql<{ state: string; generation: number | string; lease_expires_at: Date }>(
      t.db,
      'SELECT state, generation, lease_expires_at FROM task_creation_steps WHERE id = ?',
      [s.claim.stepId],
    );
    expect(row!.state).toBe('running');
    expect(Number(row!.generation)).toBe(s.claim.generation);
    expect(new Date(row!.lease_expires_at).getTime()).toBe(s.claim.leaseExpiresAt!.getTime());
  });

  it('persists the marker in three round trips and records in four', async () => {
    const s = await claimed();
    let trips = countRoundTrips(t.db);
    expect(await persistWorktreeMarker(t.db, s.claim)).toBe('persisted');
    expect(trips.calls).toBe(3);
    vi.restoreAllMocks();
    const [marker] = await sql(
      t.db,
      'SELECT kind, step_id, marker_sha256 FROM task_resource_markers WHERE resource_key = ?',
      [s.req.resource_key],
    );
    expect(marker).toMatchObject({
      kind: 'worktree',
      step_id: s.claim.stepId,
      marker_sha256: resourceMarkerSha256(s.c.operationId, s.claim.stepId, s.req.resource_key),
    });

    // A second persist finds its own marker: the same three round trips, nothing written.
    trips = countRoundTrips(t.db);
    expect(await persistWorktreeMarker(t.db, s.claim)).toBe('persisted');
    expect(trips.calls).toBeLessThanOrEqual(3);
    vi.restoreAllMocks();
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [s.c.taskId])).toBe(1);

    trips = countRoundTrips(t.db);
    const outcome = await recordFreshBranch(t.db, s.claim, { worktree_path: s.path, head_commit: s.req.base_commit });
    expect(trips.calls).toBe(4);
    vi.restoreAllMocks();
    expect(outcome.state).toBe('succeeded');
    expect((await stepState(t.db, s.claim.stepId)).state).toBe('succeeded');
    const [repoRow] = await sql(
      t.db,
      'SELECT worktree_path, branch, step_id FROM task_environment_repos WHERE id = ?',
      [s.req.task_environment_repo_id],
    );
    expect(repoRow).toEqual({ worktree_path: s.path, branch: s.req.branch, step_id: s.claim.stepId });
  });

  it("the marker's liveness fence refuses a stale claim and writes nothing", async () => {
    const s = await claimed();
    await sql(t.db, 'UPDATE task_creation_steps SET generation = generation + 1 WHERE id = ?', [s.claim.stepId]);
    await expectTyped(persistWorktreeMarker(t.db, s.claim), 'stale_claim');
    expect(await count(t.db, 'task_resource_markers', 'task_id = ?', [s.c.taskId])).toBe(0);
  });
});
