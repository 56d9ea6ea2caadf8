/**
 * The failpoint matrix: for every step kind, a worker that "crashes" (a
 * thrown FailpointError) right after its claim commits, or after the effect
 * and before the record, leaves a `running` step whose expired lease the
 * reaper turns `unknown` and reconciles from an observation of the real
 * world; the creation then finishes with exactly one `task.created` and a
 * ledger whose evidence matches the world (worktree and branch, association
 * and its one comment, session, claimed attachment files, group membership).
 * Steps run through the real step worker (`processStepJob`) and Complete
 * through the real Complete worker, on a private queue prefix with no
 * consumers. Also: a crash after Begin commits (before any wake-up) and one
 * after Complete phase B (before the dispatcher is woken), through a real
 * in-process fleet whose reaper sweep is the only healer. Both dialects.
 */
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { processCompleteJob } from '../../src/coordinator/complete-worker';
import { QueueSet } from '../../src/coordinator/queues';
import { processStepJob } from '../../src/coordinator/step-worker';
import { LEDGER_ONLY_KINDS, STEP_KINDS, type StepKind } from '../../src/domain/vocab';
import { armFailpoint, disarmAll, failpointHits, FailpointError, type FailpointName } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createProviderRegistry } from '../../src/providers/registry';
import { sweepOnce, type ReaperDeps } from '../../src/runtime/reaper';
import { createRedis } from '../../src/runtime/redis';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { EffectDeps, StepHandler } from '../../src/kinds/contract';
import { claimedAttachmentPath } from '../../src/storage/paths';
import type { Db } from '../../src/db/tx';
import { count, sql, useTestDb } from '../support/db';
import { begin } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { backdateClaim } from '../support/launch';
import { LocalProcessExecutor } from '../../src/launch/executor';
import { loadStep, stageAttachmentFiles } from '../steps/support';
import { startWorld, waitFor, type FleetWorld } from '../fleet/support';

const t = useTestDb();
const REDIS_URL = process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PREFIX = `tl-fpmatrix-${randomUUID().slice(0, 8)}`;
let provider: FakeProviderServer;
let redis: ReturnType<typeof createRedis>;
let queues: QueueSet;

beforeAll(async () => {
  provider = await startFakeProviderServer();
  redis = createRedis(REDIS_URL);
  queues = new QueueSet(redis, PREFIX);
});
afterEach(() => disarmAll());
afterAll(async () => {
  await queues?.close();
  if (redis) {
    // Only this file's prefix: other test files share this Redis.
    const keys = await redis.keys(`${PREFIX}:*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  }
  await provider?.close();
});

function effects(db: Db, dataDir: string): EffectDeps {
  return {
    db,
    dataDir,
    providers: createProviderRegistry({ timeoutMs: 5000 }),
    log: silentLogger(),
    timeoutMs: 10_000,
  };
}

function reaper(db: Db, ws: SeededWorkspace): ReaperDeps {
  return {
    effects: effects(db, ws.dataDir),
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor: 'reaper:matrix',
    workspaceId: ws.workspaceId,
  };
}

interface World {
  ws: SeededWorkspace;
  files: Map<string, Buffer>;
  slug: string;
  operationId: string;
  taskId: string;
}

/** A workspace wired for every kind, and a creation that plans all six. */
async function beginEveryKind(db: Db): Promise<World> {
  const ws = await seedWorkspace(db);
  const files = await stageAttachmentFiles(db, ws);
  const slug = `acme/m-${ws.workspaceId.slice(0, 8)}`;
  provider.addPullRequest(slug, 7);
  await sql(db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', [slug, ws.repositoryId]);
  await sql(db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [provider.githubBaseUrl, ws.connectionId]);
  const res = await begin(db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    repositories: [{ repository_id: ws.repositoryId }],
    attachments: ws.attachmentIds,
    contributions: [
      {
        provider: 'github',
        connection_id: ws.connectionId,
        repository_id: ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: '7',
      },
    ],
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
  });
  expect(res.outcome).toBe('Created');
  return { ws, files, slug, operationId: res.operationId, taskId: res.task.id };
}

interface Row {
  id: string;
  kind: StepKind;
  step_key: string;
  state: string;
  generation: number;
}

async function rowsOf(db: Db, operationId: string): Promise<Row[]> {
  const rows = await sql<Row>(
    db,
    'SELECT id, kind, step_key, state, generation FROM task_creation_steps WHERE operation_id = ? ORDER BY kind, step_key',
    [operationId],
  );
  return rows.map((r) => ({ ...r, generation: Number(r.generation) }));
}

/** One wake-up through the real step worker, as a fleet worker would process it. */
function runStep(db: Db, w: World, row: Row) {
  return processStepJob(
    {
      effects: effects(db, w.ws.dataDir),
      handlers: defaultStepHandlers,
      queues,
      log: silentLogger(),
      metrics: null,
      workerId: 'matrix-worker',
      leaseMs: 60_000,
    },
    { operationId: w.operationId, stepId: row.id, kind: row.kind, stepKey: row.step_key, generation: row.generation },
    `matrix-${row.id}-g${row.generation}`,
  );
}

/**
 * Runs every runnable step once, launch intent only after every other step
 * succeeded, re-reading the states before each wake-up: one wake-up of a
 * ledger-only step also runs its runnable ledger-only siblings (and the
 * launch intent once the rest succeeded) in its one transaction
 * (store/ledger-step.ts), so those are no longer runnable afterwards. The
 * step of `crashKind` must "crash" (FailpointError) — for a ledger-only kind,
 * inside the first ledger batch, whichever sibling's wake-up ran it; a
 * crashed process runs nothing more of that batch. Returns whether it did.
 */
async function driveRunnable(db: Db, w: World, crashKind: StepKind | null): Promise<boolean> {
  let crashed = false;
  const tried = new Set<string>();
  const ledgerCrash = crashKind !== null && LEDGER_ONLY_KINDS.has(crashKind);
  const pass = async (launch: boolean) => {
    for (;;) {
      const row = (await rowsOf(db, w.operationId)).find(
        (r) =>
          (r.kind === 'launch_intent') === launch &&
          (r.state === 'planned' || r.state === 'retry_wait') &&
          !tried.has(r.id) &&
          !(crashed && ledgerCrash && LEDGER_ONLY_KINDS.has(r.kind)),
      );
      if (!row) return;
      tried.add(row.id);
      if (row.kind === crashKind || (ledgerCrash && !crashed && LEDGER_ONLY_KINDS.has(row.kind))) {
        await expect(runStep(db, w, row)).rejects.toBeInstanceOf(FailpointError);
        crashed = true;
      } else {
        expect(await runStep(db, w, row)).toMatch(/^(succeeded|armed)$/);
      }
    }
  };
  await pass(false);
  const others = (await rowsOf(db, w.operationId)).filter((r) => r.kind !== 'launch_intent');
  if (others.every((r) => r.state === 'succeeded')) await pass(true);
  return crashed;
}

const backdateRunning = (db: Db, operationId: string) =>
  sql(
    db,
    `UPDATE task_creation_steps SET lease_expires_at = ${db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'} WHERE operation_id = ? AND state = 'running'`,
    [operationId],
  );

function git(dir: string, ...args: string[]): string {
  return execFileSync('git', ['-C', dir, ...args], { stdio: 'pipe' }).toString();
}

/** The ledger of a Created operation matches the real world, effect by effect. */
async function expectLedgerMatchesWorld(db: Db, w: World): Promise<void> {
  const { ws, taskId, operationId } = w;
  const rows = await rowsOf(db, operationId);
  expect(rows.map((r) => `${r.kind}:${r.state}`)).toEqual([
    'attachment_claim:succeeded',
    'fresh_branch_prepare:succeeded',
    'launch_intent:armed',
    'remote_contribution_associate:succeeded',
    'session_prepare:succeeded',
    'workspace_attachment:succeeded',
  ]);
  // Every step's recorded evidence is present_exact, and observing the world now still finds it exactly.
  for (const r of rows) {
    const step = await loadStep(db, r.id);
    expect(JSON.parse(step.evidence_json!).effect).toBe('present_exact');
    const seen = await (defaultStepHandlers[r.kind] as StepHandler).observe(effects(db, ws.dataDir), step);
    expect(seen.effect, `${r.kind} observed`).toBe('present_exact');
  }
  // Worktree at the recorded path, on the recorded branch at the base commit.
  const repos = await sql<{ worktree_path: string; branch: string; base_commit: string }>(
    db,
    'SELECT r.worktree_path, r.branch, r.base_commit FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id WHERE e.task_id = ?',
    [taskId],
  );
  expect(repos).toHaveLength(1);
  const repo = repos[0]!;
  expect(existsSync(repo.worktree_path)).toBe(true);
  expect(git(ws.repoPath, 'worktree', 'list', '--porcelain')).toContain(`worktree ${repo.worktree_path}\n`);
  expect(git(repo.worktree_path, 'rev-parse', '--abbrev-ref', 'HEAD').trim()).toBe(repo.branch);
  expect(git(repo.worktree_path, 'rev-parse', 'HEAD').trim()).toBe(repo.base_commit);
  // One association row, one linking comment (never posted twice).
  expect(
    await count(db, 'task_remote_contribution_associations', 'task_id = ? AND operation_id = ?', [taskId, operationId]),
  ).toBe(1);
  expect(provider.comments(w.slug, 7).filter((c) => c.body.includes(taskId))).toHaveLength(1);
  // Session prepared; group membership; attachments claimed with their bytes at the claimed path.
  expect(await count(db, 'task_sessions', 'task_id = ?', [taskId])).toBe(1);
  expect(await count(db, 'workspace_group_members', 'task_id = ? AND group_id = ?', [taskId, ws.groupId])).toBe(1);
  const atts = await sql<{ id: string; owner_kind: string; task_id: string }>(
    db,
    'SELECT id, owner_kind, task_id FROM task_message_attachments WHERE workspace_id = ? ORDER BY id',
    [ws.workspaceId],
  );
  expect(atts.map((a) => [a.id, a.owner_kind, a.task_id])).toEqual(ws.attachmentIds.map((id) => [id, 'task', taskId]));
  for (const [id, bytes] of w.files) {
    expect(readFileSync(claimedAttachmentPath(ws.dataDir, taskId, id)).equals(bytes)).toBe(true);
  }
  expect(await count(db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId])).toBe(1);
  expect(await count(db, 'event_outbox', 'task_id = ?', [taskId])).toBe(1);
}

/** What the observation of a crashed step must conclude: the effect exists only past a non-atomic effect. */
function expectedResolution(kind: StepKind, name: FailpointName): 'succeeded' | 'retry' {
  if (name === 'after_step_claim_commit') return 'retry';
  // The provider comment exists before the record and the association row with it: proven present. The Git
  // worktree with this step's marker exists too, but its environment-repo row (part of the effect authority)
  // is written only by the lost record: recovery removes the untouched marked worktree, observes it absent,
  // and the step retries (the retry adds it again).
  if (kind === 'remote_contribution_associate') return 'succeeded';
  // attachment_claim: the copies exist under the step's marker but the authority (the rows) is still exactly
  // staged: recovery removes the marked copies and releases the marker, then observes them absent -> retried
  // (the retry copies again). DB-only kinds: nothing happened before the one transaction.
  return 'retry';
}

/** Kinds with a window between the claim's commit and the record's: an effect outside the ledger. */
const CASES: [StepKind, FailpointName][] = STEP_KINDS.filter((k) => !LEDGER_ONLY_KINDS.has(k)).flatMap((kind) =>
  (['after_step_claim_commit', 'after_effect_before_record'] as const).map((n): [StepKind, FailpointName] => [kind, n]),
);

describe('a ledger-only step has no window: a crash before its one commit leaves it as it was', () => {
  it.each([...LEDGER_ONLY_KINDS])('%s', async (kind) => {
    const w = await beginEveryKind(t.db);
    const before = (await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!;
    // The two-commit failpoints never fire for this kind: claim and record are one transaction.
    armFailpoint('after_step_claim_commit', { kind: 'throw' }, { match: (c) => c.kind === kind });
    armFailpoint('after_effect_before_record', { kind: 'throw' }, { match: (c) => c.kind === kind });
    armFailpoint(
      'before_ledger_step_commit',
      { kind: 'throw' },
      { match: (c) => c.kind === kind && c.operationId === w.operationId, times: 1 },
    );
    expect(await driveRunnable(t.db, w, kind)).toBe(true);
    expect(failpointHits('before_ledger_step_commit')).toBe(1);
    expect(failpointHits('after_step_claim_commit') + failpointHits('after_effect_before_record')).toBe(0);
    // Rolled back whole: same state and generation, no lease, no owned rows; nothing for the reaper to do.
    const crashed = (await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!;
    expect(crashed).toEqual(before);
    const step = await loadStep(t.db, crashed.id);
    expect([step.lease_owner, step.evidence_json]).toEqual([null, null]);
    const seen = await (defaultStepHandlers[kind] as StepHandler).observe(effects(t.db, w.ws.dataDir), step);
    expect(seen.effect).toBe('absent_proven');
    await backdateRunning(t.db, w.operationId);
    const report = await sweepOnce(reaper(t.db, w.ws));
    expect(report.expiredSteps).toBe(0);

    // The next wake-up simply runs it; the creation finishes with one task.created.
    disarmAll();
    expect(await driveRunnable(t.db, w, null)).toBe(false);
    const after = (await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!;
    expect(after.state).toBe(kind === 'launch_intent' ? 'armed' : 'succeeded');
    expect(after.generation).toBe(before.generation + 1);
    expect(await runStep(t.db, w, crashed)).toBe('skipped');
    const done = await processCompleteJob(
      { db: t.db, queues, log: silentLogger(), metrics: null, workerId: 'matrix-complete' },
      { operationId: w.operationId },
    );
    expect(done).toBe('completed');
    await expectLedgerMatchesWorld(t.db, w);
  });
});

describe('every step kind crashing at each step failpoint recovers to one task.created', () => {
  it.each(CASES)('%s at %s', async (kind, name) => {
    const w = await beginEveryKind(t.db);
    armFailpoint(name, { kind: 'throw' }, { match: (c) => c.kind === kind && c.operationId === w.operationId });
    expect(await driveRunnable(t.db, w, kind)).toBe(true);
    expect(failpointHits(name)).toBe(1);
    disarmAll();
    const crashed = (await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!;
    expect(crashed.state).toBe('running');
    if (name === 'after_effect_before_record' && kind === 'fresh_branch_prepare') {
      // The lost-ack window is real: the worktree and its branch exist while the step is still only running.
      const step = await loadStep(t.db, crashed.id);
      const branch = (JSON.parse(step.request_json) as { branch: string }).branch;
      expect(git(w.ws.repoPath, 'branch', '--list', branch)).toContain(branch);
      expect(git(w.ws.repoPath, 'worktree', 'list', '--porcelain').match(/^worktree /gm)).toHaveLength(2);
    }
    if (name === 'after_effect_before_record' && kind === 'remote_contribution_associate') {
      expect(provider.comments(w.slug, 7).filter((c) => c.body.includes(w.taskId))).toHaveLength(1);
    }

    // Nothing moves while the lease is live; once it has expired the sweep turns the step unknown and reconciles it.
    const live = await sweepOnce(reaper(t.db, w.ws));
    expect(live.expiredSteps).toBe(0);
    expect((await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!.state).toBe('running');
    await backdateRunning(t.db, w.operationId);
    const report = await sweepOnce(reaper(t.db, w.ws));
    expect(report.expiredSteps).toBe(1);
    const want = expectedResolution(kind, name);
    expect(report.reconciled, `reconciliation of the crashed ${kind} step`).toEqual({
      succeeded: want === 'succeeded' ? 1 : 0,
      retry: want === 'retry' ? 1 : 0,
      stillUnknown: 0,
    });
    const after = (await rowsOf(t.db, w.operationId)).find((r) => r.kind === kind)!;
    expect(after.state).toBe(want === 'retry' ? 'retry_wait' : kind === 'launch_intent' ? 'armed' : 'succeeded');
    expect(after.generation).toBeGreaterThan(crashed.generation);
    if (name === 'after_effect_before_record' && kind === 'fresh_branch_prepare') {
      // Recovery removed the unrecorded, untouched worktree before observing it absent: were the operation to
      // abort now instead of retrying, nothing of this step would be left on disk without an owner.
      const step = await loadStep(t.db, crashed.id);
      const branch = (JSON.parse(step.request_json) as { branch: string }).branch;
      expect(git(w.ws.repoPath, 'branch', '--list', branch)).toBe('');
      expect(git(w.ws.repoPath, 'worktree', 'list', '--porcelain').match(/^worktree /gm)).toHaveLength(1);
    }

    expect(await driveRunnable(t.db, w, null)).toBe(false);
    // A late duplicate of the crashed wake-up finds the step finished and changes nothing.
    expect(await runStep(t.db, w, crashed)).toBe('skipped');
    const done = await processCompleteJob(
      { db: t.db, queues, log: silentLogger(), metrics: null, workerId: 'matrix-complete' },
      { operationId: w.operationId },
    );
    expect(done).toBe('completed');
    const [op] = await sql<{ state: string; result_outcome: string }>(
      t.db,
      'SELECT state, result_outcome FROM task_creation_operations WHERE id = ?',
      [w.operationId],
    );
    expect(op).toEqual({ state: 'completed', result_outcome: 'Created' });
    await expectLedgerMatchesWorld(t.db, w);
  });
});

describe('crashes around the coordinator, healed by the reaper sweep alone', () => {
  let world: FleetWorld;
  beforeAll(async () => {
    // No reaper role: the test runs the sweep itself, so nothing else can heal the crash.
    world = await startWorld(t.db, ['api', 'steps', 'complete', 'outbox', 'launch']);
  });
  afterAll(async () => {
    await world?.stop();
    const keys = await redis.keys(`${world.config.queuePrefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
  });

  const sweep = () =>
    sweepOnce({
      effects: effects(t.db, world.ws.dataDir),
      handlers: defaultStepHandlers,
      queues: world.fleet.queues,
      log: silentLogger(),
      actor: 'reaper:matrix',
      workspaceId: world.ws.workspaceId,
      // The fleet's own executor directory: dispatch recovery observes the agents the fleet started.
      executor: new LocalProcessExecutor(join(world.config.dataDir, 'runtime')),
    });

  /** Each creation links its own pull request: a contribution already associated with another task is a conflict. */
  async function post(body: Record<string, unknown>, pr: number, waitMs: number) {
    world.provider.addPullRequest('acme/app', pr);
    const res = await fetch(`${world.baseUrl}/api/v1/tasks?wait_ms=${waitMs}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${world.ws.token}` },
      body: JSON.stringify({
        workspace_id: world.ws.workspaceId,
        start_agent: true,
        agent_profile_id: world.ws.agentProfileId,
        repositories: [{ repository_id: world.ws.repositoryId }],
        contributions: [
          {
            provider: 'github',
            connection_id: world.ws.connectionId,
            repository_id: world.ws.repositoryId,
            contribution_kind: 'pull_request',
            contribution_id: String(pr),
          },
        ],
        workspace_policy: { mode: 'shared_group', group_id: world.ws.groupId },
        ...body,
      }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  }

  const opOf = async (title: string) =>
    (
      await sql<{ id: string; task_id: string; state: string }>(
        t.db,
        'SELECT o.id, o.task_id, o.state FROM task_creation_operations o JOIN tasks t ON t.id = o.task_id WHERE o.workspace_id = ? AND t.title = ?',
        [world.ws.workspaceId, title],
      )
    )[0];

  it('after_begin_commit_before_enqueue: Begin committed, no wake-up sent; the sweep wakes it and it completes', async () => {
    armFailpoint(
      'after_begin_commit_before_enqueue',
      { kind: 'throw' },
      {
        match: (c) => c.workspaceId === world.ws.workspaceId,
        times: 1,
      },
    );
    const res = await post({ title: 'crash after begin' }, 51, 5000);
    expect(res.status).toBe(500);
    expect(failpointHits('after_begin_commit_before_enqueue')).toBe(1);
    const op = await opOf('crash after begin');
    expect(op?.state).toBe('preparing');
    // No job was ever sent for this operation: every step is still planned.
    const states = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_steps WHERE operation_id = ?', [
      op!.id,
    ]);
    expect(states.length).toBe(5);
    expect(states.every((s) => s.state === 'planned')).toBe(true);

    const report = await sweep();
    expect(report.wakeups).toBeGreaterThanOrEqual(1);
    await waitFor(
      'the swept creation to complete',
      async () => (await opOf('crash after begin'))?.state === 'completed',
      45_000,
    );
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [op!.task_id])).toBe(1);
    expect(await count(t.db, 'task_sessions', 'task_id = ?', [op!.task_id])).toBe(1);
    expect(await count(t.db, 'task_remote_contribution_associations', 'task_id = ?', [op!.task_id])).toBe(1);
    expect(world.provider.comments('acme/app', 51).filter((c) => c.body.includes(op!.task_id))).toHaveLength(1);
  });

  it('after_complete_before_outbox_delivery: task.created committed, dispatcher never woken; the sweep delivers it exactly once', async () => {
    // A first (not replayed) Complete only: a late replay of the previous test's creation must not use up the shot.
    armFailpoint(
      'after_complete_before_outbox_delivery',
      { kind: 'throw' },
      { times: 1, match: (c) => c.replayed === false },
    );
    const res = await post({ title: 'crash after complete' }, 52, 45_000);
    // The waiter sees the committed ending by its poll (the announcement was lost with the crash).
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ creation_complete: true, deduplicated: false });
    expect(failpointHits('after_complete_before_outbox_delivery')).toBe(1);
    const taskId = res.body.task.id as string;
    const operationId = res.body.operation_id as string;
    // Nothing woke the dispatcher: the event is undelivered and nothing was started. Phase B took the launch's
    // claim for the worker (ADR 0019): it stays `running` under that worker's lease, which the crash ends.
    const [event] = await sql<{ delivered_at: Date | null; created_at: Date }>(
      t.db,
      "SELECT delivered_at, created_at FROM event_outbox WHERE task_id = ? AND type = 'task.created'",
      [taskId],
    );
    expect(event!.delivered_at).toBeNull();
    const claimsOf = () =>
      sql<{ state: string; generation: number }>(
        t.db,
        'SELECT state, generation FROM task_launch_dispatch_claims WHERE task_id = ?',
        [taskId],
      );
    expect((await claimsOf()).map((c) => [c.state, Number(c.generation)])).toEqual([['running', 1]]);
    expect(await count(t.db, 'executors_running', 'task_id = ?', [taskId])).toBe(0);

    const report = await sweep();
    expect(report.wakeups).toBeGreaterThanOrEqual(1);
    await waitFor(
      'delivery of task.created',
      async () => (await count(t.db, 'event_outbox', 'task_id = ? AND delivered_at IS NOT NULL', [taskId])) === 1,
      30_000,
    );
    // The delivery leaves the claim to its lease; once it has run out, the sweep's dispatch recovery proves that
    // nothing was started and retries the launch.
    expect((await claimsOf()).map((c) => c.state)).toEqual(['running']);
    await backdateClaim(t.db, operationId);
    await sweep();
    const claim = await waitFor(
      'the launch dispatch claim to settle',
      async () =>
        (
          await sql<{ state: string; created_at: Date; error_code: string | null }>(
            t.db,
            "SELECT state, created_at, error_code FROM task_launch_dispatch_claims WHERE task_id = ? AND state NOT IN ('planned', 'running', 'retry_wait')",
            [taskId],
          )
        )[0],
      45_000,
    );
    // Retried once from no-dispatch proof (generation 2), then claimed and started (3).
    expect(claim).toMatchObject({ state: 'succeeded', error_code: 'no_dispatch_proven' });
    expect((await claimsOf()).map((c) => Number(c.generation))).toEqual([3]);
    expect(new Date(claim.created_at).getTime()).toBeGreaterThanOrEqual(new Date(event!.created_at).getTime());
    // A second sweep finds nothing undelivered; still exactly one task.created and one dispatch claim.
    await sweep();
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId])).toBe(1);
    const [delivered] = await sql<{ delivery_attempts: number }>(
      t.db,
      "SELECT delivery_attempts FROM event_outbox WHERE task_id = ? AND type = 'task.created'",
      [taskId],
    );
    expect(Number(delivered!.delivery_attempts)).toBe(1);
    expect(await count(t.db, 'task_launch_dispatch_claims', 'task_id = ?', [taskId])).toBe(1);
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      operationId,
    ]);
    expect(op!.state).toBe('completed');
  });
});
