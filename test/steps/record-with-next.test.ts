/**
 * A performed Git effect's record opens the ledger batch that goes on with
 * the operation (store/ledger-step.ts `recordAndApplyLedgerSteps`, ADR
 * 0041): the worktree's rows and the step's success, the launch intent armed
 * and Complete's phase A commit in one transaction; a stale claim writes
 * nothing of it; in a workspace being deleted the record commits alone; and
 * the step worker, meeting a conflict in what follows the record, records it
 * alone and finishes the creation as before. Both dialects.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { processCompleteJob } from '../../src/coordinator/complete-worker';
import { enqueuePlanned } from '../../src/coordinator/enqueue';
import { ledgerKindsOf, processStepJob, type StepWorkerDeps } from '../../src/coordinator/step-worker';
import { ConflictError, TaskLedgerError } from '../../src/domain/errors';
import type { StepKind } from '../../src/domain/vocab';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandlers } from '../../src/kinds/registry';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import type { LedgerApply } from '../../src/store/ledger-apply';
import {
  claimAndApplyLedgerSteps,
  recordAndApplyLedgerSteps,
  type LedgerBatchResult,
} from '../../src/store/ledger-step';
import type { StepClaim } from '../../src/store/types';
import type { StepJob } from '../../queues/names';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { markerWrittenWithClaim } from '../../src/kinds/fresh-branch-prepare/ledger';
import { stepRows } from '../support/ledger';
import { useTestQueues } from '../support/queues';
import { beginGitCreation } from './support';

const t = useTestDb();
const { queues } = useTestQueues('record-with-next');
const kinds = ledgerKindsOf(defaultStepHandlers);
const git = defaultStepHandlers.fresh_branch_prepare;
const noHeartbeat = async () => {};

afterEach(() => vi.restoreAllMocks());

async function gitCreation() {
  const { ws, res, auth } = await beginGitCreation(t.db);
  const effects: StepWorkerDeps['effects'] = {
    db: t.db,
    dataDir: ws.dataDir,
    providers: createProviderRegistry({ timeoutMs: 5000 }),
    log: silentLogger(),
    timeoutMs: 5000,
  };
  return { ws, res, auth, effects };
}

/** A worker that runs the operation's next steps itself (the fleet's), with `launch` as the launch intent's handler. */
function inlineWorker(
  effects: StepWorkerDeps['effects'],
  launch: StepHandlers['launch_intent'],
  workerId: string,
): StepWorkerDeps {
  const log = silentLogger();
  return {
    effects,
    handlers: { ...defaultStepHandlers, launch_intent: launch } as StepHandlers,
    queues,
    log,
    metrics: null,
    workerId,
    leaseMs: 30_000,
    inline: { complete: { db: t.db, queues, log, metrics: null, workerId } },
  };
}

/** The first ledger batch, claiming the Git step with itself (ADR 0040). */
async function claimGit(c: Awaited<ReturnType<typeof gitCreation>>, owner: string): Promise<StepClaim> {
  const attach = (await stepRows(t.db, c.res.operationId)).find((r) => r.kind === 'workspace_attachment')!;
  const batch = await claimAndApplyLedgerSteps(
    t.db,
    c.auth,
    { kind: 'workspace_attachment', stepKey: attach.step_key },
    owner,
    30_000,
    kinds,
    { effects: (k) => (k === 'fresh_branch_prepare' ? { marker: git.markerWithClaim } : null) },
  );
  expect(batch.claimed.map((cl) => cl.kind)).toEqual(['fresh_branch_prepare']);
  return batch.claimed[0]!;
}

const statesOf = async (operationId: string) =>
  Object.fromEntries((await stepRows(t.db, operationId)).map((r) => [r.kind, r.state]));

const opState = async (operationId: string) =>
  (await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [operationId]))[0]!
    .state;

describe('the Git record opens the next ledger batch', () => {
  it("the claiming batch reads the worktree's marker and the repository row with its locks, in no round trip of their own", async () => {
    const c = await gitCreation();
    const gitRow = (await stepRows(t.db, c.res.operationId)).find((r) => r.kind === 'fresh_branch_prepare')!;
    const [stored] = await sql<{ request_json: string }>(
      t.db,
      'SELECT request_json FROM task_creation_steps WHERE id = ?',
      [gitRow.id],
    );
    const key = (JSON.parse(stored!.request_json) as { resource_key: string }).resource_key;
    const trips = countRoundTrips(t.db, key);
    const claim = await claimGit(c, 'w0');
    vi.restoreAllMocks();
    // The marker's lock (which reads the row and answers the marker's read, with the repository row beside it),
    // then the INSERT with COMMIT.
    expect(trips.calls).toBe(2);
    expect(trips.texts[0]).toContain(c.ws.repositoryId);
    expect(trips.texts[1]).toMatch(/COMMIT/);
    expect(markerWrittenWithClaim(claim)).toBe(true);
    expect(await git.perform(c.effects, claim, noHeartbeat)).toBe('succeeded');
  });

  it('records the worktree, arms the launch intent and runs phase A in one transaction; phase B completes', async () => {
    const c = await gitCreation();
    const claim = await claimGit(c, 'w1');
    let batch: LedgerBatchResult | undefined;
    let trips = 0;
    const state = await git.perform(c.effects, claim, noHeartbeat, async (held) => {
      expect(held.name).toBe('RecordFreshBranch');
      const counted = countRoundTrips(t.db);
      batch = await recordAndApplyLedgerSteps(t.db, claim, held, 'w1', 30_000, kinds, { phaseA: true });
      trips = counted.calls;
      vi.restoreAllMocks();
      return batch.results[0]!.outcome;
    });
    // The guard; the union of locks (which read what the record and the launch intent read); the record's INSERT
    // and read-back with the launch intent's claim and arm and phase A's reads; phase A's writes with COMMIT.
    expect(trips).toBe(4);
    expect(state).toBe('succeeded');
    expect(batch!.results.map((r) => `${r.claim.kind}:${r.outcome.state}`)).toEqual([
      'fresh_branch_prepare:succeeded',
      'launch_intent:armed',
    ]);
    expect(batch!.phaseA).toBe('completing');
    expect(await opState(c.res.operationId)).toBe('completing');
    expect(await count(t.db, 'task_environment_repos', 'step_id = ?', [claim.stepId])).toBe(1);

    await processCompleteJob(
      { db: t.db, queues, log: silentLogger(), metrics: null, workerId: 'w1' },
      { operationId: c.res.operationId },
      { phaseADone: true, steps: batch!.steps },
    );
    expect(await opState(c.res.operationId)).toBe('completed');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [c.res.task.id])).toBe(1);
  });

  it('a stale claim: the transaction writes nothing, neither the record nor the launch intent', async () => {
    const c = await gitCreation();
    const claim = await claimGit(c, 'w2');
    await expect(
      git.perform(c.effects, claim, noHeartbeat, async (held) => {
        // The lease ran out while Git ran: the reaper may already be observing.
        await sql(
          t.db,
          `UPDATE task_creation_steps SET lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 second'" : 'NOW(3) - INTERVAL 1 SECOND'} WHERE id = ?`,
          [claim.stepId],
        );
        const batch = await recordAndApplyLedgerSteps(t.db, claim, held, 'w2', 30_000, kinds, { phaseA: true });
        return batch.results[0]!.outcome;
      }),
    ).rejects.toMatchObject({ code: 'stale_claim' });
    expect(await statesOf(c.res.operationId)).toMatchObject({
      fresh_branch_prepare: 'running',
      launch_intent: 'planned',
    });
    expect(await count(t.db, 'task_environment_repos', 'step_id = ?', [claim.stepId])).toBe(0);
    expect(await opState(c.res.operationId)).toBe('preparing');
  });

  it('in a workspace being deleted the record commits alone: no launch intent is claimed', async () => {
    const c = await gitCreation();
    const claim = await claimGit(c, 'w3');
    let batch: LedgerBatchResult | undefined;
    const state = await git.perform(c.effects, claim, noHeartbeat, async (held) => {
      await sql(t.db, "UPDATE workspaces SET state = 'deleting' WHERE id = ?", [c.ws.workspaceId]);
      batch = await recordAndApplyLedgerSteps(t.db, claim, held, 'w3', 30_000, kinds, { phaseA: true });
      return batch.results[0]!.outcome;
    });
    expect(state).toBe('succeeded');
    expect(batch!.results.map((r) => r.claim.kind)).toEqual(['fresh_branch_prepare']);
    expect(batch!.phaseA).toBeNull();
    expect(await statesOf(c.res.operationId)).toMatchObject({
      fresh_branch_prepare: 'succeeded',
      launch_intent: 'planned',
    });
    expect(await opState(c.res.operationId)).toBe('preparing');
  });

  it('the step worker meets a conflict after the record: it records alone and still finishes the creation', async () => {
    const c = await gitCreation();
    // The launch intent's apply refuses once, as a conflict would: the whole batch rolls back, record included.
    let refused = 0;
    const launch = defaultStepHandlers.launch_intent;
    const apply: LedgerApply = async (tx, claim, ctx) => {
      if (refused === 0) {
        refused += 1;
        throw new ConflictError('creation_state_conflict', 'refused once by the test');
      }
      return launch.applyInClaim!(tx, claim, ctx);
    };
    const deps = inlineWorker(c.effects, { ...launch, applyInClaim: apply }, 'w4');
    await enqueuePlanned(queues, c.res.operationId, c.res.steps);
    const jobs: StepJob[] = [];
    for (const q of queues.all()) {
      for (const j of await q.getJobs(['waiting', 'delayed', 'prioritized'])) {
        const data = j.data as StepJob;
        if (data.operationId === c.res.operationId && typeof data.stepId === 'string') jobs.push(data);
      }
    }
    expect(jobs).toHaveLength(1);
    const job = jobs[0]!;
    expect(await processStepJob(deps, job, 'w4-job')).toBe('succeeded');
    expect(refused).toBe(1);
    expect(await statesOf(c.res.operationId)).toMatchObject({
      fresh_branch_prepare: 'succeeded',
      launch_intent: 'armed',
    });
    expect(await opState(c.res.operationId)).toBe('completed');
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [c.res.task.id])).toBe(1);
  });
  it('a database fault in that batch is not retried as a conflict: the step stays running for the reaper', async () => {
    const c = await gitCreation();
    const launch = defaultStepHandlers.launch_intent;
    const apply: LedgerApply = async () => {
      throw new TaskLedgerError('commit_outcome_unknown', 'the connection was lost at COMMIT (test)');
    };
    const deps = inlineWorker(c.effects, { ...launch, applyInClaim: apply }, 'w5');
    const attach = (await stepRows(t.db, c.res.operationId)).find((r) => r.kind === 'workspace_attachment')!;
    const job = {
      operationId: c.res.operationId,
      stepId: attach.id,
      kind: attach.kind as StepKind,
      stepKey: attach.step_key,
      generation: attach.generation,
    };
    await expect(processStepJob(deps, job, 'w5-job')).rejects.toMatchObject({ code: 'commit_outcome_unknown' });
    // Nothing recorded alone after it: the record's transaction rolled back, and the worktree waits for the reaper.
    expect(await statesOf(c.res.operationId)).toMatchObject({
      fresh_branch_prepare: 'running',
      launch_intent: 'planned',
    });
  });
});
