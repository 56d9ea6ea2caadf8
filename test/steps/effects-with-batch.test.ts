/**
 * A creation's first ledger batch claims its first-attempt Git step with
 * itself, and the worker performs it right after COMMIT (ADR 0040): Begin's
 * first wake-ups are one ledger job (no Git job), the worker that runs it
 * makes the worktree and finishes the creation in place, and the step is
 * claimed once (attempt 1) under a lease as a claim of its own would be, its
 * ownership marker written with the claim (and deleted again by a failure
 * found before Git is touched). A
 * batch asked for no effect kinds leaves the Git step `planned`; a worker
 * without the Git kind's handler leaves it for its own queued wake-up.
 * Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { StepJob } from '../../queues/names';
import { enqueuePlanned } from '../../src/coordinator/enqueue';
import { processStepJob, type StepWorkerDeps } from '../../src/coordinator/step-worker';
import type { StepKind } from '../../src/domain/vocab';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { claimAndApplyLedgerSteps } from '../../src/store/ledger-step';
import { markerWrittenWithClaim } from '../../src/kinds/fresh-branch-prepare/ledger';
import { ledgerKindsOf } from '../../src/coordinator/step-worker';
import { count, sql, useTestDb } from '../support/db';
import { begin, stepRows } from '../support/ledger';
import { makeGitRepo, seedWorkspace } from '../support/seed';
import { useTestQueues } from '../support/queues';
import { beginGitCreation } from './support';

const t = useTestDb();
const { queues } = useTestQueues('effects-with-batch');

async function gitCreation() {
  const { ws, res, auth } = await beginGitCreation(t.db);
  return { ws, res, auth, effects: effectsFor(ws.dataDir) };
}

function effectsFor(dataDir: string): StepWorkerDeps['effects'] {
  return {
    db: t.db,
    dataDir,
    providers: createProviderRegistry({ timeoutMs: 5000 }),
    log: silentLogger(),
    timeoutMs: 5000,
  };
}

const waitingJobs = async (kind: StepKind) => {
  const jobs = await queues.step(kind).getJobs(['waiting', 'delayed', 'prioritized']);
  return jobs.length;
};

/** The step wake-ups waiting for this operation, in any step queue. */
async function jobsOf(operationId: string): Promise<StepJob[]> {
  const out: StepJob[] = [];
  for (const q of queues.all()) {
    for (const j of await q.getJobs(['waiting', 'delayed', 'prioritized'])) {
      const data = j.data as StepJob;
      if (data.operationId === operationId && typeof data.stepId === 'string') out.push(data);
    }
  }
  return out;
}

function workerDeps(effects: StepWorkerDeps['effects'], handlers = defaultStepHandlers): StepWorkerDeps {
  return {
    effects,
    handlers,
    queues,
    log: silentLogger(),
    metrics: null,
    workerId: 'batch-worker',
    leaseMs: 30_000,
    inline: { complete: { db: t.db, queues, log: silentLogger(), metrics: null, workerId: 'batch-worker' } },
  };
}

describe('effect steps claimed with the ledger batch', () => {
  it('Begin wakes one ledger job; its worker makes the worktree and completes the creation in place', async () => {
    const { ws, res, effects } = await gitCreation();
    const gitBefore = await waitingJobs('fresh_branch_prepare');
    const summary = await enqueuePlanned(queues, res.operationId, res.steps);
    expect(summary.steps).toBe(1);
    expect(await waitingJobs('fresh_branch_prepare')).toBe(gitBefore);

    const jobs = await jobsOf(res.operationId);
    expect(jobs).toHaveLength(1);
    expect(jobs[0]!.kind).not.toBe('fresh_branch_prepare');

    expect(await processStepJob(workerDeps(effects), jobs[0]!, 'test-job')).toBe('succeeded');
    const after = await stepRows(t.db, res.operationId);
    const git = after.find((r) => r.kind === 'fresh_branch_prepare')!;
    expect(git.state).toBe('succeeded');
    const [counts] = await sql<{ attempt: number | string; generation: number | string }>(
      t.db,
      'SELECT attempt, generation FROM task_creation_steps WHERE id = ?',
      [git.id],
    );
    expect([Number(counts!.attempt), Number(counts!.generation)]).toEqual([1, 1]);
    const [envRepo] = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE step_id = ?',
      [git.id],
    );
    expect(envRepo!.worktree_path.startsWith(join(ws.dataDir, 'worktrees'))).toBe(true);
    expect(existsSync(envRepo!.worktree_path)).toBe(true);
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'completed'", [res.operationId])).toBe(1);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
    expect(await waitingJobs('fresh_branch_prepare')).toBe(gitBefore);
  });

  it('two repositories: the batch claims both Git steps and its worker makes both worktrees', async () => {
    const ws = await seedWorkspace(t.db);
    const second = randomUUID();
    await sql(
      t.db,
      `INSERT INTO repositories (id, workspace_id, name, path, default_branch, created_at) VALUES (?, ?, 'lib', ?, 'main', ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'})`,
      [second, ws.workspaceId, makeGitRepo()],
    );
    const res = await begin(t.db, ws, {
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
      repositories: [
        { repository_id: ws.repositoryId, fresh_branch: true },
        { repository_id: second, fresh_branch: true },
      ],
      start_agent: true,
      agent_profile_id: ws.agentProfileId,
    });
    expect(res.outcome).toBe('Created');
    const effects = effectsFor(ws.dataDir);
    await enqueuePlanned(queues, res.operationId, res.steps);
    const jobs = await jobsOf(res.operationId);
    expect(jobs).toHaveLength(1);
    expect(await processStepJob(workerDeps(effects), jobs[0]!, 'two-repos')).toBe('succeeded');
    const gits = (await stepRows(t.db, res.operationId)).filter((r) => r.kind === 'fresh_branch_prepare');
    expect(gits.map((g) => g.state)).toEqual(['succeeded', 'succeeded']);
    const paths = await sql<{ worktree_path: string }>(
      t.db,
      'SELECT worktree_path FROM task_environment_repos WHERE step_id IN (?, ?)',
      gits.map((g) => g.id),
    );
    expect(paths).toHaveLength(2);
    for (const p of paths) expect(existsSync(p.worktree_path)).toBe(true);
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [res.task.id])).toBe(1);
  });

  it('the batch claims the Git step leased, as a claim of its own, only when asked', async () => {
    const { res, auth } = await gitCreation();
    const rows = await stepRows(t.db, res.operationId);
    const attach = rows.find((r) => r.kind === 'workspace_attachment')!;
    const ref = { kind: 'workspace_attachment' as const, stepKey: attach.step_key };
    const kinds = ledgerKindsOf(defaultStepHandlers);

    const plain = await claimAndApplyLedgerSteps(t.db, auth, ref, 'w1', 30_000, kinds);
    expect(plain.claimed).toEqual([]);
    expect((await stepRows(t.db, res.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!.state).toBe(
      'planned',
    );

    const second = await gitCreation();
    const rows2 = await stepRows(t.db, second.res.operationId);
    const attach2 = rows2.find((r) => r.kind === 'workspace_attachment')!;
    const batch = await claimAndApplyLedgerSteps(
      t.db,
      second.auth,
      { kind: 'workspace_attachment', stepKey: attach2.step_key },
      'w2',
      30_000,
      kinds,
      {
        effects: (k) =>
          k === 'fresh_branch_prepare' ? { marker: defaultStepHandlers.fresh_branch_prepare.markerWithClaim } : null,
      },
    );
    expect(batch.results.every((r) => r.outcome.state === 'succeeded')).toBe(true);
    expect(batch.claimed.map((c) => c.kind)).toEqual(['fresh_branch_prepare']);
    const claim = batch.claimed[0]!;
    expect(claim.generation).toBe(1);
    expect(claim.leaseExpiresAt).toBeInstanceOf(Date);
    const [row] = await sql<{
      state: string;
      generation: number | string;
      attempt: number | string;
      lease_owner: string;
    }>(t.db, 'SELECT state, generation, attempt, lease_owner FROM task_creation_steps WHERE id = ?', [claim.stepId]);
    expect({ ...row, generation: Number(row!.generation), attempt: Number(row!.attempt) }).toEqual({
      state: 'running',
      generation: 1,
      attempt: 1,
      lease_owner: 'w2',
    });
  });

  it("writes the worktree's marker with the claim; a preflight failure then deletes it with the failure", async () => {
    const { ws, res, auth, effects } = await gitCreation();
    const rows = await stepRows(t.db, res.operationId);
    const attach = rows.find((r) => r.kind === 'workspace_attachment')!;
    const git = defaultStepHandlers.fresh_branch_prepare;
    // The repository row names no repository any more; the batch reads it with the claim (ADR 0041).
    await sql(t.db, 'UPDATE repositories SET path = ? WHERE id = ?', [join(ws.dataDir, 'not-a-repo'), ws.repositoryId]);
    const batch = await claimAndApplyLedgerSteps(
      t.db,
      auth,
      { kind: 'workspace_attachment', stepKey: attach.step_key },
      'w3',
      30_000,
      ledgerKindsOf(defaultStepHandlers),
      { effects: (k) => (k === 'fresh_branch_prepare' ? { marker: git.markerWithClaim } : null) },
    );
    const claim = batch.claimed[0]!;
    expect(markerWrittenWithClaim(claim)).toBe(true);
    const markers = () =>
      sql<{ step_id: string; kind: string }>(
        t.db,
        "SELECT step_id, kind FROM task_resource_markers WHERE task_id = ? AND kind = 'worktree'",
        [res.task.id],
      );
    expect(await markers()).toEqual([{ step_id: claim.stepId, kind: 'worktree' }]);

    // The preflight fails before Git is touched: the failure's transaction deletes the marker again.
    expect(await git.perform(effects, claim, async () => {})).toBe('failed');
    expect(await markers()).toEqual([]);
    const [row] = await sql<{ state: string; error_code: string; evidence_json: string }>(
      t.db,
      'SELECT state, error_code, evidence_json FROM task_creation_steps WHERE id = ?',
      [claim.stepId],
    );
    expect(row!.state).toBe('failed');
    expect(row!.error_code).toBe('not_a_repository');
    expect(JSON.parse(row!.evidence_json).effect).toBe('absent_proven');
  });

  it("a foreign marker at the Git step's key: the batch claims the step without writing, and perform records unknown", async () => {
    const { res, auth, effects } = await gitCreation();
    const rows = await stepRows(t.db, res.operationId);
    const gitRow = rows.find((r) => r.kind === 'fresh_branch_prepare')!;
    const [stored] = await sql<{ request_json: string }>(
      t.db,
      'SELECT request_json FROM task_creation_steps WHERE id = ?',
      [gitRow.id],
    );
    const key = (JSON.parse(stored!.request_json) as { resource_key: string }).resource_key;
    const foreign = { operation: randomUUID(), step: randomUUID() };
    await sql(
      t.db,
      `INSERT INTO task_resource_markers (resource_key, workspace_id, task_id, operation_id, step_id, kind, marker_sha256, created_at)
       VALUES (?, ?, ?, ?, ?, 'worktree', ?, ${t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)'})`,
      [key, res.task.workspace_id, res.task.id, foreign.operation, foreign.step, 'f'.repeat(64)],
    );
    const attach = rows.find((r) => r.kind === 'workspace_attachment')!;
    const git = defaultStepHandlers.fresh_branch_prepare;
    const batch = await claimAndApplyLedgerSteps(
      t.db,
      auth,
      { kind: 'workspace_attachment', stepKey: attach.step_key },
      'w4',
      30_000,
      ledgerKindsOf(defaultStepHandlers),
      { effects: (k) => (k === 'fresh_branch_prepare' ? { marker: git.markerWithClaim } : null) },
    );
    const claim = batch.claimed[0]!;
    expect(claim.kind).toBe('fresh_branch_prepare');
    expect(markerWrittenWithClaim(claim)).toBe(false);
    expect(await git.perform(effects, claim, async () => {})).toBe('unknown');
    const [marker] = await sql<{ step_id: string }>(
      t.db,
      'SELECT step_id FROM task_resource_markers WHERE resource_key = ?',
      [key],
    );
    expect(marker!.step_id).toBe(foreign.step);
    const [row] = await sql<{ error_code: string }>(t.db, 'SELECT error_code FROM task_creation_steps WHERE id = ?', [
      claim.stepId,
    ]);
    expect(row!.error_code).toBe('foreign_marker');
  });

  it('a worker without the Git handler leaves the Git step to its own queued wake-up', async () => {
    const { res, effects } = await gitCreation();
    await enqueuePlanned(queues, res.operationId, res.steps);
    const [job] = await jobsOf(res.operationId);
    const { fresh_branch_prepare: _git, ...withoutGit } = defaultStepHandlers;
    const gitBefore = await waitingJobs('fresh_branch_prepare');
    expect(await processStepJob(workerDeps(effects, withoutGit as typeof defaultStepHandlers), job!, 'j')).toBe(
      'succeeded',
    );
    const git = (await stepRows(t.db, res.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!;
    expect(git.state).toBe('planned');
    expect(await waitingJobs('fresh_branch_prepare')).toBe(gitBefore + 1);
  });
});
