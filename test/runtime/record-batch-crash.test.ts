/**
 * A worker that dies inside the ledger batch its Git record opened (ADR
 * 0041), after the record and before COMMIT: nothing of that transaction
 * is kept — the Git step is still `running` under its lease with its marker
 * and its marked worktree, the launch intent `planned`, no environment-repo
 * row — exactly what a crash before the record's own COMMIT left. The
 * reaper turns the expired lease `unknown`, removes the untouched, unrecorded
 * worktree and retries the step; the retry finishes the creation with one
 * worktree and one `task.created`. Both dialects.
 */
import { existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { QueueSet } from '../../src/coordinator/queues';
import { processStepJob, type StepWorkerDeps } from '../../src/coordinator/step-worker';
import { armFailpointsFromSpec, disarmAll, FailpointError } from '../../src/failpoints';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepKind } from '../../src/domain/vocab';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { sweepOnce } from '../../src/runtime/reaper';
import { createRedis } from '../../src/runtime/redis';
import { count, sql, useTestDb } from '../support/db';
import { stepRows } from '../support/ledger';
import { beginGitCreation } from '../steps/support';

const t = useTestDb();
const REDIS_URL = process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PREFIX = `tl-recordcrash-${randomUUID().slice(0, 8)}`;
let redis: ReturnType<typeof createRedis>;
let queues: QueueSet;

beforeAll(() => {
  redis = createRedis(REDIS_URL);
  queues = new QueueSet(redis, PREFIX);
});
afterEach(() => disarmAll());
afterAll(async () => {
  await queues?.close();
  const keys = await redis.keys(`${PREFIX}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
});

function workerDeps(dataDir: string): StepWorkerDeps {
  const log = silentLogger();
  return {
    effects: { db: t.db, dataDir, providers: createProviderRegistry({ timeoutMs: 5000 }), log, timeoutMs: 10_000 },
    handlers: defaultStepHandlers,
    queues,
    log,
    metrics: null,
    workerId: 'crash-worker',
    leaseMs: 60_000,
    inline: { complete: { db: t.db, queues, log, metrics: null, workerId: 'crash-worker' } },
  };
}

const jobOf = (operationId: string, row: { id: string; kind: string; step_key: string; generation: number }) => ({
  operationId,
  stepId: row.id,
  kind: row.kind as StepKind,
  stepKey: row.step_key,
  generation: row.generation,
});

describe('a crash inside the batch a Git record opened', () => {
  it('leaves the step running with its marked worktree; the reaper and a retry finish the creation once', async () => {
    const { ws, res } = await beginGitCreation(t.db);
    const deps = workerDeps(ws.dataDir);
    armFailpointsFromSpec('before_ledger_step_commit=throw:kind=fresh_branch_prepare:times=1');
    const attach = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'workspace_attachment')!;
    await expect(processStepJob(deps, jobOf(res.operationId, attach), 'crash-1')).rejects.toBeInstanceOf(
      FailpointError,
    );

    const states = async () =>
      Object.fromEntries((await stepRows(t.db, res.operationId)).map((r) => [r.kind, r.state]));
    expect(await states()).toMatchObject({
      workspace_attachment: 'succeeded',
      session_prepare: 'succeeded',
      fresh_branch_prepare: 'running',
      launch_intent: 'planned',
    });
    const gitStep = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!;
    expect(await count(t.db, 'task_environment_repos', 'step_id = ?', [gitStep.id])).toBe(0);
    const worktrees = () =>
      sql<{ resource_key: string }>(
        t.db,
        "SELECT resource_key FROM task_resource_markers WHERE task_id = ? AND kind = 'worktree'",
        [res.task.id],
      );
    expect(await worktrees()).toHaveLength(1);

    // The lease runs out; the reaper's sweep resolves the step from what it observes.
    await sql(
      t.db,
      `UPDATE task_creation_steps SET lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'} WHERE operation_id = ? AND state = 'running'`,
      [res.operationId],
    );
    await sweepOnce({
      effects: deps.effects,
      handlers: defaultStepHandlers,
      queues: null,
      log: silentLogger(),
      actor: 'reaper:record-crash',
      workspaceId: ws.workspaceId,
    });
    const git = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!;
    expect(git.state).toBe('retry_wait');

    // The retry makes the worktree again (the unrecorded one was removed) and finishes the creation inline.
    expect(await processStepJob(deps, jobOf(res.operationId, git), 'retry-1')).toBe('succeeded');
    expect(await states()).toMatchObject({ fresh_branch_prepare: 'succeeded', launch_intent: 'armed' });
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      res.operationId,
    ]);
    expect(op!.state).toBe('completed');
    const repos = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE step_id = ?',
      [git.id],
    );
    expect(repos).toHaveLength(1);
    expect(existsSync(repos[0]!.worktree_path)).toBe(true);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
  });
});
