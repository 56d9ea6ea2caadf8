/**
 * The `remote_contribution_associate` step end to end: real ledger (this
 * project's dialect), real HTTP to the fake provider server, real Octokit /
 * Gitbeaker clients. Success on both providers (row, one comment, evidence
 * Complete accepts), duplicate delivery, every failure class, recovery's
 * observation after an ambiguous write, a contribution held by another task,
 * and two tasks racing for one contribution.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCanonical } from '../../src/canonical/canonical-json';
import type { StepEvidence } from '../../src/canonical/types';
import { silentLogger } from '../../src/log';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createProviderRegistry } from '../../src/providers/registry';
import { remoteContributionAssociateHandler as handler } from '../../src/kinds/remote-contribution-associate/step';
import type { EffectDeps } from '../../src/kinds/contract';
import { completeTaskCreation } from '../../src/store/complete';
import { associationDoc, ownershipMarker } from '../../src/kinds/remote-contribution-associate/ledger';
import { rowHash } from '../../src/store/effects/row-documents';
import { claimTaskCreationStep, renewTaskCreationStepLease } from '../../src/store/step-claims';
import { resolveTaskCreationStep } from '../../src/store/step-results';
import { STEP_COLUMNS } from '../../src/store/step-rows';
import type { OperationAuthority, StepClaim, StepRow } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, expectTyped } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

const t = useTestDb();
const KIND = 'remote_contribution_associate' as const;
const NUMBER = 7;
let server: FakeProviderServer;
let deps: EffectDeps;

beforeAll(async () => {
  server = await startFakeProviderServer();
  deps = {
    db: t.db,
    dataDir: '/nonexistent',
    providers: createProviderRegistry({ timeoutMs: 500 }),
    log: silentLogger(),
    timeoutMs: 500,
  };
});

afterAll(async () => {
  await server?.close();
});

type Provider = 'github' | 'gitlab';

interface World {
  ws: SeededWorkspace;
  provider: Provider;
  slug: string;
  connectionId: string;
  contribution: Record<string, unknown>;
}

/** A seeded workspace whose connection points at the fake server and whose repository has a remote slug. */
async function world(provider: Provider, opts: { addContribution?: boolean } = {}): Promise<World> {
  const ws = await seedWorkspace(t.db, { attachments: 0 });
  const tag = randomUUID().slice(0, 8);
  let connectionId = ws.connectionId;
  let slug: string;
  if (provider === 'github') {
    slug = `octo/repo-${tag}`;
    await sql(t.db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [server.githubBaseUrl, connectionId]);
    if (opts.addContribution !== false) server.addPullRequest(slug, NUMBER);
  } else {
    slug = `group/sub/repo-${tag}`;
    connectionId = randomUUID();
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO provider_connections (id, workspace_id, provider, base_url, token, created_at) VALUES (?, ?, 'gitlab', ?, 'glpat-test', ${now})`,
      [connectionId, ws.workspaceId, server.gitlabBaseUrl],
    );
    if (opts.addContribution !== false) server.addMergeRequest(slug, NUMBER);
  }
  await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', [slug, ws.repositoryId]);
  const contribution = {
    provider,
    connection_id: connectionId,
    repository_id: ws.repositoryId,
    contribution_kind: provider === 'github' ? 'pull_request' : 'merge_request',
    contribution_id: String(NUMBER),
  };
  return { ws, provider, slug, connectionId, contribution };
}

interface Task {
  auth: OperationAuthority;
  operationId: string;
  taskId: string;
  stepKey: string;
}

async function task(w: World): Promise<Task> {
  const res = await begin(t.db, w.ws, { contributions: [w.contribution] });
  const [step] = await sql<{ step_key: string }>(
    t.db,
    'SELECT step_key FROM task_creation_steps WHERE operation_id = ? AND kind = ?',
    [res.operationId, KIND],
  );
  return {
    auth: { kind: 'handle', handle: res.handle! },
    operationId: res.operationId,
    taskId: res.task.id,
    stepKey: step!.step_key,
  };
}

const claimOf = (tk: Task, owner = 'w1') =>
  claimTaskCreationStep(t.db, tk.auth, { kind: KIND, stepKey: tk.stepKey }, owner);
const perform = (claim: StepClaim) =>
  handler.perform(deps, claim, () => renewTaskCreationStepLease(t.db, claim).then(() => undefined));

async function stepRow(
  stepId: string,
): Promise<StepRow & { provider_handle: string | null; ownership_marker: string | null }> {
  const [row] = await sql<StepRow & { provider_handle: string | null; ownership_marker: string | null }>(
    t.db,
    `SELECT ${STEP_COLUMNS}, provider_handle, ownership_marker FROM task_creation_steps WHERE id = ?`,
    [stepId],
  );
  return { ...row!, generation: Number(row!.generation), attempt: Number(row!.attempt) };
}

const evidenceOf = (row: { evidence_json: string | null }) =>
  parseCanonical(row.evidence_json!) as unknown as StepEvidence;

async function associations(w: World) {
  const rows = await sql(
    t.db,
    'SELECT * FROM task_remote_contribution_associations WHERE connection_id = ? AND contribution_id = ?',
    [w.connectionId, String(NUMBER)],
  );
  return rows.map((r) => associationDoc(r));
}

const requestsFor = (w: World) =>
  server.requests.filter((r) => r.path.includes(encodeURIComponent(w.slug)) || r.path.includes(`/repos/${w.slug}/`));
const comments = (w: World) => server.comments(w.slug, NUMBER);
const writePath = (w: World) =>
  w.provider === 'github'
    ? new RegExp(`/repos/${w.slug}/issues/${NUMBER}/comments$`)
    : new RegExp(`${encodeURIComponent(w.slug)}/merge_requests/${NUMBER}/notes$`);
const readPath = (w: World) =>
  w.provider === 'github'
    ? new RegExp(`/repos/${w.slug}/pulls/${NUMBER}$`)
    : new RegExp(`${encodeURIComponent(w.slug)}/merge_requests/${NUMBER}$`);

describe.each(['github', 'gitlab'] as const)('%s contribution', (provider) => {
  it('succeeds: one association row with the handle, one marker comment, evidence Complete accepts', async () => {
    const w = await world(provider);
    const tk = await task(w);
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('succeeded');

    const [assoc] = await associations(w);
    const marker = ownershipMarker(tk.operationId, claim.stepId, claim.idempotencyKey);
    expect(assoc).toMatchObject({
      task_id: tk.taskId,
      operation_id: tk.operationId,
      step_id: claim.stepId,
      idempotency_key: claim.idempotencyKey,
      ownership_marker: marker,
    });
    const posted = comments(w);
    expect(posted).toEqual([
      { id: assoc!.provider_handle, body: `Linked to taskledger task ${tk.taskId} (marker ${marker})` },
    ]);

    const row = await stepRow(claim.stepId);
    expect(row).toMatchObject({
      state: 'succeeded',
      provider_handle: assoc!.provider_handle,
      ownership_marker: marker,
    });
    const evidence = evidenceOf(row);
    expect(evidence.effect).toBe('present_exact');
    expect(evidence.observation).toMatchObject({
      association_row_sha256: rowHash(assoc),
      provider_handle: assoc!.provider_handle,
      idempotency_key: claim.idempotencyKey,
      ownership_marker: marker,
    });
    expect(await completeTaskCreation(t.db, tk.auth)).toMatchObject({ outcome: 'Created' });
  });

  it('a job delivered twice (stale claim) changes nothing and posts nothing', async () => {
    const w = await world(provider);
    const tk = await task(w);
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('succeeded');
    const before = { rows: await associations(w), step: await stepRow(claim.stepId), requests: requestsFor(w).length };
    await expectTyped(perform(claim), 'stale_claim');
    expect(await associations(w)).toEqual(before.rows);
    expect(await stepRow(claim.stepId)).toEqual(before.step);
    expect(requestsFor(w)).toHaveLength(before.requests);
    expect(comments(w)).toHaveLength(1);
  });

  it('404 -> failed (absent_proven), association row deleted, no comment', async () => {
    const w = await world(provider, { addContribution: false });
    const tk = await task(w);
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('failed');
    expect(await associations(w)).toEqual([]);
    expect(comments(w)).toEqual([]);
    const row = await stepRow(claim.stepId);
    expect(row.state).toBe('failed');
    expect(evidenceOf(row)).toMatchObject({ effect: 'absent_proven' });
    expect(evidenceOf(row).observation).toMatchObject({ rows: [{ row_sha256: null }] });
  });

  it('503 on the read -> retry_wait with the row deleted; the retry then succeeds with one comment', async () => {
    const w = await world(provider);
    const tk = await task(w);
    server.injectFault({ method: 'GET', path: readPath(w), fault: 503 });
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('retry_wait');
    expect(await associations(w)).toEqual([]);
    expect(comments(w)).toEqual([]);
    const retry = await claimOf(tk, 'w2');
    expect(await perform(retry)).toBe('succeeded');
    expect(await associations(w)).toHaveLength(1);
    expect(comments(w)).toHaveLength(1);
  });

  it('timeout after the write -> unknown with the row kept; observe says present once the fault clears', async () => {
    const w = await world(provider);
    const tk = await task(w);
    server.injectFault({ method: 'POST', path: writePath(w), fault: 'timeout-after-write' });
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('unknown');
    const [assoc] = await associations(w);
    expect(assoc).toMatchObject({ step_id: claim.stepId, provider_handle: null });
    expect(comments(w)).toHaveLength(1);

    const observed = await handler.observe(deps, await stepRow(claim.stepId));
    expect(observed.effect).toBe('present_exact');
    expect(observed.evidence.observation).toMatchObject({
      association_row_sha256: rowHash(assoc),
      provider_handle: comments(w)[0]!.id,
    });
    // Recovery resolves from that proof, and Complete accepts the row it names.
    await resolveTaskCreationStep(
      t.db,
      tk.auth,
      { kind: KIND, stepKey: tk.stepKey },
      {
        resolution: 'succeeded',
        evidence: observed.evidence,
      },
    );
    expect(await completeTaskCreation(t.db, tk.auth)).toMatchObject({ outcome: 'Created' });
    expect(comments(w)).toHaveLength(1);
  });
});

describe('contention and misconfiguration', () => {
  it('a contribution already associated to another task -> failed, the foreign row untouched, nothing posted', async () => {
    const w = await world('github');
    const first = await task(w);
    const second = await task(w);
    expect(await perform(await claimOf(first))).toBe('succeeded');
    const held = await associations(w);
    const posted = requestsFor(w).filter((r) => r.method === 'POST').length;

    const claim = await claimOf(second);
    expect(await perform(claim)).toBe('failed');
    expect(await associations(w)).toEqual(held);
    expect(requestsFor(w).filter((r) => r.method === 'POST')).toHaveLength(posted);
    expect(comments(w)).toHaveLength(1);
    const evidence = evidenceOf(await stepRow(claim.stepId));
    expect(evidence).toMatchObject({ effect: 'absent_proven' });
    expect(evidence.observation).toMatchObject({ rows: [{ row_sha256: rowHash(held[0]) }] });
  });

  it('two tasks racing for one contribution -> exactly one association and one comment', async () => {
    const w = await world('gitlab');
    const a = await task(w);
    const b = await task(w);
    const [ca, cb] = await Promise.all([claimOf(a), claimOf(b)]);
    const states = await Promise.all([perform(ca), perform(cb)]);
    expect([...states].sort()).toEqual(['failed', 'succeeded']);
    const rows = await associations(w);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.task_id).toBe(states[0] === 'succeeded' ? a.taskId : b.taskId);
    expect(comments(w)).toHaveLength(1);
  });

  it('a repository without remote_slug or a connection of another provider -> failed before any provider call', async () => {
    const w = await world('github');
    const tk = await task(w);
    await sql(t.db, 'UPDATE repositories SET remote_slug = NULL WHERE id = ?', [w.ws.repositoryId]);
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('failed');
    expect((await stepRow(claim.stepId)).state).toBe('failed');

    const w2 = await world('github');
    const tk2 = await task(w2);
    await sql(t.db, "UPDATE provider_connections SET provider = 'gitlab' WHERE id = ?", [w2.connectionId]);
    expect(await perform(await claimOf(tk2))).toBe('failed');
    expect(requestsFor(w)).toEqual([]);
    expect(requestsFor(w2)).toEqual([]);
    expect(
      await count(t.db, 'task_remote_contribution_associations', 'repository_id IN (?, ?)', [
        w.ws.repositoryId,
        w2.ws.repositoryId,
      ]),
    ).toBe(0);
  });
});

describe('observe', () => {
  it('absent before anything ran; present after success; conflict on a foreign association; unobservable on credential loss', async () => {
    const w = await world('github');
    const tk = await task(w);
    const other = await task(w);
    const [planned] = await sql<{ id: string }>(
      t.db,
      'SELECT id FROM task_creation_steps WHERE operation_id = ? AND kind = ?',
      [tk.operationId, KIND],
    );
    expect((await handler.observe(deps, await stepRow(planned!.id))).effect).toBe('absent_proven');

    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('succeeded');
    const present = await handler.observe(deps, await stepRow(claim.stepId));
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(evidenceOf(await stepRow(claim.stepId)).observation);

    const [otherStep] = await sql<{ id: string }>(
      t.db,
      'SELECT id FROM task_creation_steps WHERE operation_id = ? AND kind = ?',
      [other.operationId, KIND],
    );
    expect((await handler.observe(deps, await stepRow(otherStep!.id))).effect).toBe('conflict');

    await sql(t.db, "UPDATE provider_connections SET token = 'revoked' WHERE id = ?", [w.connectionId]);
    const lost = await handler.observe(deps, await stepRow(claim.stepId));
    expect(lost.effect).toBe('unobservable');
    expect(lost.evidence.observation).toMatchObject({ reason: expect.stringMatching(/provider read failed.*401/) });
  });

  it('a timeout before the write -> unknown with the row kept; observe: claimed row, no marker comment -> absent, and the retry links once', async () => {
    const w = await world('gitlab');
    const tk = await task(w);
    server.injectFault({ method: 'POST', path: writePath(w), fault: 'timeout' });
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('unknown');
    expect(comments(w)).toEqual([]);
    const [assoc] = await associations(w);
    expect(evidenceOf(await stepRow(claim.stepId))).toMatchObject({
      effect: 'conflict',
      observation: { rows: [{ row_sha256: rowHash(assoc) }] },
    });
    const seen = await handler.observe(deps, await stepRow(claim.stepId));
    expect(seen.effect).toBe('absent_proven');
    expect(seen.evidence.observation).toMatchObject({
      reason: 'our association row is claimed but the provider shows no marker comment',
    });
    // Resolved from that proof, the retry reuses the row and posts the one comment.
    const auth: OperationAuthority = { kind: 'operation', operationId: claim.operationId, actor: 'operator' };
    const ref = { kind: claim.kind, stepKey: claim.stepKey };
    expect(await resolveTaskCreationStep(t.db, auth, ref, { resolution: 'retry_wait', evidence: seen.evidence })).toBe(
      'retry_wait',
    );
    expect(await perform(await claimTaskCreationStep(t.db, tk.auth, ref, 'worker-2'))).toBe('succeeded');
    expect(comments(w)).toHaveLength(1);
    expect(await associations(w)).toHaveLength(1);
  });

  it('Complete refuses an association row that no longer matches the evidence', async () => {
    const w = await world('github');
    const tk = await task(w);
    const claim = await claimOf(tk);
    expect(await perform(claim)).toBe('succeeded');
    await sql(t.db, "UPDATE task_remote_contribution_associations SET provider_handle = '1' WHERE step_id = ?", [
      claim.stepId,
    ]);
    await expectTyped(completeTaskCreation(t.db, tk.auth), 'evidence_mismatch');
  });
});
