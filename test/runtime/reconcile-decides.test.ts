/**
 * Every creation ends (issue 13, section 1): an `unknown` step is decided from
 * what its observation proves, for every provider answer. A pull request the
 * provider answers 404 for proves the link absent: the step retries, fails
 * permanently, the other effects are compensated and the creation aborts.
 * An answer that proves nothing (503, 401, a timeout) leaves the step
 * `unknown` with the reason noted and its next look paced — never observed
 * again before then — and `ops list --stuck` shows the operation with the one
 * action it waits for; once the provider answers, the step is decided.
 * Both dialects, the real fake provider over HTTP.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { processStepJob } from '../../src/coordinator/step-worker';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { silentLogger } from '../../src/log';
import { createMetrics } from '../../src/metrics';
import { createProviderRegistry } from '../../src/providers/registry';
import { sweepOnce, type ReaperDeps } from '../../src/runtime/reaper';
import { findStuckOperations } from '../../src/runtime/stuck';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { EffectDeps } from '../../src/kinds/contract';
import type { Db } from '../../src/db/tx';
import { useFakeProvider } from '../compensation/support';
import { sql, useTestDb } from '../support/db';
import { begin } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 1300;

function effects(db: Db, dataDir: string): EffectDeps {
  return { db, dataDir, providers: createProviderRegistry({ timeoutMs: 2000 }), log: silentLogger(), timeoutMs: 5000 };
}

function reaper(ws: SeededWorkspace, metrics = createMetrics()): ReaperDeps {
  return {
    effects: effects(t.db, ws.dataDir),
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor: 'reaper:decides',
    workspaceId: ws.workspaceId,
    metrics,
    stuckAfterMs: 0,
  };
}

interface Row {
  id: string;
  kind: string;
  step_key: string;
  state: string;
  generation: number | string;
  error_code: string | null;
}

const rows = (operationId: string) =>
  sql<Row>(
    t.db,
    'SELECT id, kind, step_key, state, generation, error_code FROM task_creation_steps WHERE operation_id = ? ORDER BY kind',
    [operationId],
  );

function runStep(ws: SeededWorkspace, operationId: string, row: Row) {
  return processStepJob(
    {
      effects: effects(t.db, ws.dataDir),
      handlers: defaultStepHandlers,
      queues: null as never,
      log: silentLogger(),
      metrics: null,
      workerId: `worker-${randomUUID().slice(0, 6)}`,
      leaseMs: 60_000,
    },
    { operationId, stepId: row.id, kind: row.kind as never, stepKey: row.step_key, generation: Number(row.generation) },
    `job-${row.id}-${Number(row.generation)}`,
  );
}

/** A creation linking PR `n` (plus a workspace attachment), its link step left `unknown` by a dead worker. */
async function unknownLink(): Promise<{ ws: SeededWorkspace; operationId: string; slug: string; n: number }> {
  const ws = await seedWorkspace(t.db);
  const slug = `acme/d-${ws.workspaceId.slice(0, 8)}`;
  const n = ++pr;
  fake.server.addPullRequest(slug, n);
  await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', [slug, ws.repositoryId]);
  await sql(t.db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [
    fake.server.githubBaseUrl,
    ws.connectionId,
  ]);
  const res = await begin(t.db, ws, {
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    contributions: [
      {
        provider: 'github',
        connection_id: ws.connectionId,
        repository_id: ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: String(n),
      },
    ],
  });
  for (const row of await rows(res.operationId)) {
    if (row.kind === 'remote_contribution_associate') {
      armFailpoint('after_step_claim_commit', { kind: 'throw' }, { times: 1 });
      await expect(runStep(ws, res.operationId, row)).rejects.toBeInstanceOf(FailpointError);
      disarmAll();
    } else {
      expect(await runStep(ws, res.operationId, row)).toBe('succeeded');
    }
  }
  const past = t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE';
  await sql(
    t.db,
    `UPDATE task_creation_steps SET lease_expires_at = ${past} WHERE operation_id = ? AND state = 'running'`,
    [res.operationId],
  );
  return { ws, operationId: res.operationId, slug, n };
}

const linkStep = async (operationId: string) =>
  (await rows(operationId)).find((r) => r.kind === 'remote_contribution_associate')!;
const opState = async (operationId: string) =>
  (
    await sql<{ state: string; abort_cause: string | null }>(
      t.db,
      'SELECT state, abort_cause FROM task_creation_operations WHERE id = ?',
      [operationId],
    )
  )[0]!;

describe('an unknown link step', () => {
  it('a pull request the provider answers 404 for: absent, the retry fails permanently, the creation aborts', async () => {
    const c = await unknownLink();
    fake.server.injectFault({ method: 'GET', path: new RegExp(`/pulls/${c.n}$`), fault: 404, times: 100 });
    try {
      const r1 = await sweepOnce(reaper(c.ws));
      expect(r1.reconciled).toMatchObject({ retry: 1, stillUnknown: 0 });
      const step = await linkStep(c.operationId);
      expect(step.state).toBe('retry_wait');
      // The retry (a worker's) reads the pull request again: 404 is permanent.
      expect(await runStep(c.ws, c.operationId, step)).toBe('failed');
      await sweepOnce(reaper(c.ws));
      expect(await opState(c.operationId)).toEqual({ state: 'aborted', abort_cause: 'step_failed_permanently' });
      expect(
        await sql(t.db, 'SELECT 1 FROM task_remote_contribution_associations WHERE operation_id = ?', [c.operationId]),
      ).toEqual([]);
      expect(await sql(t.db, 'SELECT 1 FROM workspace_group_members WHERE operation_id = ?', [c.operationId])).toEqual(
        [],
      );
    } finally {
      fake.server.clearFaults();
    }
  });

  it.each([
    ['a provider failing (503)', 503],
    ['credentials refused (401)', 401],
  ] as const)(
    '%s: stays unknown with the reason noted, is not observed again before its time, then decides',
    async (_n, status) => {
      const c = await unknownLink();
      fake.server.injectFault({ method: 'GET', path: new RegExp(`/pulls/${c.n}$`), fault: status, times: 100 });
      const metrics = createMetrics();
      try {
        const r1 = await sweepOnce(reaper(c.ws, metrics));
        expect(r1.reconciled).toMatchObject({ succeeded: 0, retry: 0, stillUnknown: 1 });
        const step = await linkStep(c.operationId);
        expect(step).toMatchObject({ state: 'unknown', error_code: 'unobservable' });
        const text = await metrics.registry.metrics();
        expect(text).toMatch(
          /taskledger_reconciliations_total\{kind="remote_contribution_associate",verdict="unobservable"\} 1/,
        );
        expect(text).toMatch(/taskledger_stuck_operations\{action="reconcile_unknown_step"\} 1/);
        const seen = fake.server.requests.length;
        // Not due yet: the next sweep does not look (and nothing spins).
        const r2 = await sweepOnce(reaper(c.ws, metrics));
        expect(r2.reconciled).toEqual({ succeeded: 0, retry: 0, stillUnknown: 0 });
        expect(fake.server.requests.length).toBe(seen);
        const [stuck] = await findStuckOperations(t.db, { stuckAfterMs: 0, workspaceId: c.ws.workspaceId });
        expect(stuck).toMatchObject({ operation_id: c.operationId, action: 'reconcile_unknown_step' });
        expect(stuck!.waiting_for).toMatch(new RegExp(`remote_contribution_associate/.*unobservable.*HTTP ${status}`));
      } finally {
        fake.server.clearFaults();
      }
      // The provider answers again; at the step's next look it is decided (no marker comment: absent, retry).
      await sql(t.db, 'UPDATE task_creation_steps SET next_attempt_at = NULL WHERE operation_id = ?', [c.operationId]);
      const r3 = await sweepOnce(reaper(c.ws, metrics));
      expect(r3.reconciled).toMatchObject({ retry: 1, stillUnknown: 0 });
      expect((await linkStep(c.operationId)).state).toBe('retry_wait');
    },
  );
});
