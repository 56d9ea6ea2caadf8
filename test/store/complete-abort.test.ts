/**
 * Complete (two phases, exactly one task.created, replay), compensation and
 * cleanup transfer, Abort (predicate, partial-row deletion, no event), and
 * tampering: a mutated handle, manifest, actor document, request or evidence
 * cannot Complete or Abort. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { stageAttachmentFiles } from '../steps/support';
import { abortTaskCreation } from '../../src/store/abort';
import { claimTaskCreationCompensation, completeTaskCreationCompensation } from '../../src/store/compensation';
import { completeTaskCreation, completeTaskCreationPhaseA, completeTaskCreationPhaseB } from '../../src/store/complete';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { completeTaskCreationStep, failTaskCreationStep } from '../../src/store/step-results';
import type { CompensationClaim, OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { observedAt, permanentFailure, presentEvidence } from '../support/evidence';
import { begin, driveAllSteps, expectTyped, snapshot, stepRows } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();
let provider: FakeProviderServer;
beforeAll(async () => {
  provider = await startFakeProviderServer();
  provider.addPullRequest('acme/app', 9);
});
afterAll(async () => {
  await provider?.close();
});

/** A workspace whose attachments have real staged files and whose repository and connection point at the fake provider. */
async function created(body: Record<string, unknown> = {}) {
  const ws = await seedWorkspace(t.db);
  await stageAttachmentFiles(t.db, ws);
  await sql(t.db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', ['acme/app', ws.repositoryId]);
  await sql(t.db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [
    provider.githubBaseUrl,
    ws.connectionId,
  ]);
  const res = await begin(t.db, ws, {
    external_id: `ext-${randomUUID()}`,
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
        contribution_id: '9',
      },
    ],
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId, environment_id: ws.sharedEnvironmentId },
    ...body,
  });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  return { ws, res, auth, snap: () => snapshot(t.db, res.operationId, res.task.id) };
}

const events = (taskId: string) => count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId]);

describe('CompleteTaskCreation', () => {
  it('refuses before the Complete predicate holds, with zero writes', async () => {
    const c = await created();
    const before = await c.snap();
    await expectTyped(completeTaskCreation(t.db, c.auth), 'creation_state_conflict');
    expect(await c.snap()).toBe(before);
  });

  it('commits phase A then phase B: one task.created, revision one, settled ID; replays without writing', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    const result = await completeTaskCreation(t.db, c.auth);
    expect(result).toMatchObject({ outcome: 'Created', revision: 1, replayed: false, workspaceId: c.ws.workspaceId });
    const [task] = await sql<{ creation_state: string; external_id_settled_at: Date | null; revision: number }>(
      t.db,
      'SELECT creation_state, external_id_settled_at, revision FROM tasks WHERE id = ?',
      [c.res.task.id],
    );
    expect(task!.creation_state).toBe('completed');
    expect(task!.external_id_settled_at).not.toBeNull();
    expect(Number(task!.revision)).toBe(1);
    expect(await events(c.res.task.id)).toBe(1);
    const [ev] = await sql<{ event_id: string; revision: number; payload_json: string }>(
      t.db,
      'SELECT event_id, revision, payload_json FROM event_outbox WHERE task_id = ?',
      [c.res.task.id],
    );
    expect(ev!.event_id).toBe(result.eventId);
    expect(JSON.parse(ev!.payload_json)).toMatchObject({ type: 'task.created', task_id: c.res.task.id, revision: 1 });
    expect(await count(t.db, 'task_revisions', 'task_id = ? AND revision = 1', [c.res.task.id])).toBe(1);

    const before = await c.snap();
    const again = await completeTaskCreation(t.db, c.auth);
    expect(again).toMatchObject({
      outcome: 'Created',
      eventId: result.eventId,
      replayed: true,
      workspaceId: c.ws.workspaceId,
    });
    const recovery = await completeTaskCreation(t.db, {
      kind: 'operation',
      operationId: c.res.operationId,
      actor: 'recovery',
    });
    expect(recovery.eventId).toBe(result.eventId);
    expect(await c.snap()).toBe(before);
    expect(await events(c.res.task.id)).toBe(1);
  });

  it('a crash between phase A and phase B is finished by a recovery actor without the handle', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    expect(await completeTaskCreationPhaseA(t.db, c.auth)).toBe('completing');
    const [mid] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      c.res.operationId,
    ]);
    expect(mid!.state).toBe('completing');
    expect(await events(c.res.task.id)).toBe(0);
    // Phase A again is a no-op; Abort is no longer legal.
    expect(await completeTaskCreationPhaseA(t.db, c.auth)).toBe('already_completing');
    await expectTyped(abortTaskCreation(t.db, c.auth, 'too late'), 'creation_state_conflict');
    const done = await completeTaskCreationPhaseB(t.db, {
      kind: 'operation',
      operationId: c.res.operationId,
      actor: 'recovery',
    });
    expect(done.outcome).toBe('Created');
    expect(await events(c.res.task.id)).toBe(1);
  });

  it('concurrent Completes write exactly one task.created', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    const results = await Promise.allSettled(Array.from({ length: 4 }, () => completeTaskCreation(t.db, c.auth)));
    const ok = results
      .filter((r) => r.status === 'fulfilled')
      .map((r) => (r as PromiseFulfilledResult<{ eventId: string }>).value);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    expect(new Set(ok.map((r) => r.eventId)).size).toBe(1);
    expect(await events(c.res.task.id)).toBe(1);
  });

  it('reports CreatedIdentityLost when the external ID was released before Complete', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, 'UPDATE tasks SET external_id = NULL WHERE id = ?', [c.res.task.id]);
    await sql(
      t.db,
      `UPDATE task_creation_operations SET release_applied = ${t.db.dialect === 'postgres' ? 'true' : '1'} WHERE id = ?`,
      [c.res.operationId],
    );
    const result = await completeTaskCreation(t.db, c.auth);
    expect(result.outcome).toBe('CreatedIdentityLost');
    const [ev] = await sql<{ payload_json: string }>(t.db, 'SELECT payload_json FROM event_outbox WHERE task_id = ?', [
      c.res.task.id,
    ]);
    expect(JSON.parse(ev!.payload_json).external_id).toBeNull();
  });
});

describe('tampering cannot Complete or Abort', () => {
  const handleMutations: [string, (h: Record<string, string>) => Record<string, string>][] = [
    ['completion token', (h) => ({ ...h, completionToken: Buffer.alloc(32, 7).toString('base64url') })],
    ['malformed completion token', (h) => ({ ...h, completionToken: 'x' })],
    ['manifest hash', (h) => ({ ...h, manifestHash: 'a'.repeat(64) })],
    ['actor binding hash', (h) => ({ ...h, actorBindingHash: 'b'.repeat(64) })],
    ['task id', (h) => ({ ...h, taskId: randomUUID() })],
  ];

  it.each(handleMutations)('a mutated handle (%s) gets handle_mismatch with zero writes', async (_n, mutate) => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    const before = await c.snap();
    const bad: OperationAuthority = {
      kind: 'handle',
      handle: mutate({ ...c.res.handle! } as unknown as Record<string, string>) as never,
    };
    await expectTyped(completeTaskCreation(t.db, bad), 'handle_mismatch');
    await expectTyped(abortTaskCreation(t.db, bad, 'x'), 'handle_mismatch');
    expect(await c.snap()).toBe(before);
  });

  const rowMutations: [string, string, string][] = [
    [
      'plan bytes (manifest)',
      'task_creation_operations',
      'plan_json = REPLACE(plan_json, \'"version":1\', \'"version":1 \')',
    ],
    ['plan title', 'task_creation_operations', "plan_json = REPLACE(plan_json, 'shared_group', 'new_workspace')"],
    ['actor document', 'task_creation_operations', "actor_json = REPLACE(actor_json, 'alice', 'mallory')"],
    ['manifest hash column', 'task_creation_operations', "manifest_hash = '" + 'c'.repeat(64) + "'"],
    ['completion token hash', 'task_creation_operations', "completion_token_sha256 = '" + 'd'.repeat(64) + "'"],
  ];

  it.each(rowMutations)('a mutated %s stops Complete and Abort', async (_n, table, set) => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, `UPDATE ${table} SET ${set} WHERE id = ?`, [c.res.operationId]);
    const before = await c.snap();
    await expectTyped(completeTaskCreation(t.db, c.auth), 'handle_mismatch');
    await expectTyped(abortTaskCreation(t.db, c.auth, 'x'), 'handle_mismatch');
    expect(await c.snap()).toBe(before);
  });

  it.each([
    ['request bytes', 'request_json = REPLACE(request_json, \'"task_id"\', \'"task_id" \')'],
    ['request hash', "request_sha256 = '" + 'e'.repeat(64) + "'"],
    ['idempotency key', "idempotency_key = '" + 'f'.repeat(64) + "'"],
    ['evidence bytes', "evidence_json = REPLACE(evidence_json, 'present_exact', 'conflict')"],
    ['evidence hash', "evidence_sha256 = '" + '1'.repeat(64) + "'"],
  ])('a mutated step %s cannot Complete (evidence_mismatch, zero writes)', async (_n, set) => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, `UPDATE task_creation_steps SET ${set} WHERE operation_id = ? AND kind = 'session_prepare'`, [
      c.res.operationId,
    ]);
    const before = await c.snap();
    await expectTyped(completeTaskCreation(t.db, c.auth), 'evidence_mismatch');
    expect(await c.snap()).toBe(before);
  });

  it('evidence changed after phase A verified it: phase B re-validates the new bytes and refuses', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    // Phase A validates every step's evidence (and this process remembers the verified bytes).
    expect(await completeTaskCreationPhaseA(t.db, c.auth)).toBe('completing');
    await sql(
      t.db,
      "UPDATE task_creation_steps SET evidence_json = REPLACE(evidence_json, 'present_exact', 'conflict') WHERE operation_id = ? AND kind = 'session_prepare'",
      [c.res.operationId],
    );
    const before = await c.snap();
    await expectTyped(completeTaskCreationPhaseB(t.db, c.auth), 'evidence_mismatch');
    expect(await c.snap()).toBe(before);
    expect(await events(c.res.task.id)).toBe(0);
  });

  it('a mutated task row (byte-equivalence with the manifest) cannot Complete', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, "UPDATE tasks SET title = 'changed behind the ledger' WHERE id = ?", [c.res.task.id]);
    const before = await c.snap();
    await expectTyped(completeTaskCreation(t.db, c.auth), 'evidence_mismatch');
    expect(await c.snap()).toBe(before);
  });

  it('a revoked caller token invalidates the handle', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    await sql(t.db, 'UPDATE api_tokens SET revision = revision + 1 WHERE id = ?', [c.ws.member.authority_id]);
    await expectTyped(completeTaskCreation(t.db, c.auth), 'handle_mismatch');
  });
});

describe('compensation, transfer and Abort', () => {
  async function failedWithEffects() {
    const c = await created({ start_agent: false, agent_profile_id: null, repositories: [], contributions: [] });
    const rows = await stepRows(t.db, c.res.operationId);
    const attach = rows.find((r) => r.kind === 'attachment_claim')!;
    const wsStep = rows.find((r) => r.kind === 'workspace_attachment')!;
    const a = await claimTaskCreationStep(t.db, c.auth, { kind: 'attachment_claim', stepKey: attach.step_key }, 'w1');
    await completeTaskCreationStep(t.db, a, { evidence: presentEvidence(a) });
    const w = await claimTaskCreationStep(
      t.db,
      c.auth,
      { kind: 'workspace_attachment', stepKey: wsStep.step_key },
      'w1',
    );
    await failTaskCreationStep(t.db, w, permanentFailure(w));
    return { ...c, attach, wsStep };
  }

  function proof(
    claim: CompensationClaim,
    outcome: 'compensated' | 'transferred' | 'retry_wait',
    jobId: string | null = null,
  ) {
    return {
      version: 1 as const,
      kind: claim.kind,
      step_key: claim.stepKey,
      request_sha256: claim.requestSha256,
      outcome,
      cleanup_job_id: jobId,
      observation: { reason: `compensation ${outcome}`, rows: [] },
      observed_at: observedAt(),
    };
  }

  it('Abort is refused while compensation is pending, with zero writes', async () => {
    const c = await failedWithEffects();
    const before = await c.snap();
    const err = await abortTaskCreation(t.db, c.auth, 'provider_rejected').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'creation_state_conflict' });
    expect(JSON.stringify((err as { detail: unknown }).detail)).toContain('compensation is required');
    expect(await c.snap()).toBe(before);
  });

  it('compensated effects let Abort delete the partial rows, keep the ledger, write no event, and free the ID', async () => {
    const c = await failedWithEffects();
    const ref = { kind: 'attachment_claim' as const, stepKey: c.attach.step_key };
    const claim = await claimTaskCreationCompensation(t.db, c.auth, ref, 'comp-1');
    expect(claim.evidence?.effect).toBe('present_exact');
    await expectTyped(
      completeTaskCreationCompensation(t.db, { ...claim, compensationGeneration: 0 }, proof(claim, 'compensated')),
      'stale_claim',
    );
    await completeTaskCreationCompensation(t.db, claim, proof(claim, 'compensated'));
    const result = await abortTaskCreation(t.db, c.auth, 'provider_rejected');
    expect(result).toMatchObject({ replayed: false, cause: 'provider_rejected' });
    expect(await count(t.db, 'tasks', 'id = ?', [c.res.task.id])).toBe(0);
    expect(await count(t.db, 'task_repositories', 'task_id = ?', [c.res.task.id])).toBe(0);
    expect(await count(t.db, 'task_creation_steps', 'operation_id = ?', [c.res.operationId])).toBe(2);
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      c.res.operationId,
    ]);
    expect(op!.state).toBe('aborted');
    const [ident] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_identities WHERE task_id = ?', [
      c.res.task.id,
    ]);
    expect(ident!.state).toBe('aborted');
    expect(await count(t.db, 'event_outbox', 'task_id = ?', [c.res.task.id])).toBe(0);
    // Replay, and the external ID is free again for a new creation.
    expect((await abortTaskCreation(t.db, c.auth, 'again')).replayed).toBe(true);
    const retry = await begin(t.db, c.ws, { external_id: c.res.task.external_id });
    expect(retry.outcome).toBe('Created');
    expect(retry.task.id).not.toBe(c.res.task.id);
    // The aborted identity can never be reused.
    await expectTyped(begin(t.db, c.ws, { task_id: c.res.task.id }), 'task_identity_reused');
  });

  it('a transfer commits its cleanup job with the proof in the same transaction, and Abort accepts it', async () => {
    const c = await failedWithEffects();
    const ref = { kind: 'attachment_claim' as const, stepKey: c.attach.step_key };
    const claim = await claimTaskCreationCompensation(t.db, c.auth, ref, 'comp-1');
    const jobId = randomUUID();
    await expectTyped(
      completeTaskCreationCompensation(t.db, claim, proof(claim, 'transferred', jobId), null),
      'invalid_document',
    );
    await completeTaskCreationCompensation(t.db, claim, proof(claim, 'transferred', jobId), {
      reason: 'attachment_changed',
      proof: { attachment_ids: c.ws.attachmentIds, task_id: c.res.task.id },
    });
    const [job] = await sql<{ state: string; proof_sha256: string; step_id: string }>(
      t.db,
      'SELECT state, proof_sha256, step_id FROM task_resource_cleanup_jobs WHERE id = ?',
      [jobId],
    );
    expect(job).toMatchObject({ state: 'pending', step_id: c.attach.id });
    const [step] = await sql<{ cleanup_job_id: string; compensation_state: string }>(
      t.db,
      'SELECT cleanup_job_id, compensation_state FROM task_creation_steps WHERE id = ?',
      [c.attach.id],
    );
    expect(step).toMatchObject({ cleanup_job_id: jobId, compensation_state: 'transferred' });
    const result = await abortTaskCreation(t.db, c.auth, 'provider_rejected');
    expect(result.cleanupJobIds).toEqual([jobId]);
  });

  it('compensation retry_wait can be claimed again with the next generation', async () => {
    const c = await failedWithEffects();
    const ref = { kind: 'attachment_claim' as const, stepKey: c.attach.step_key };
    const first = await claimTaskCreationCompensation(t.db, c.auth, ref, 'comp-1');
    await completeTaskCreationCompensation(t.db, first, proof(first, 'retry_wait'));
    await expectTyped(abortTaskCreation(t.db, c.auth, 'x'), 'creation_state_conflict');
    const second = await claimTaskCreationCompensation(t.db, c.auth, ref, 'comp-2');
    expect(second.compensationGeneration).toBe(first.compensationGeneration + 1);
    await expectTyped(completeTaskCreationCompensation(t.db, first, proof(first, 'compensated')), 'stale_claim');
  });

  it('Abort never cancels an armed launch intent', async () => {
    const c = await created();
    await driveAllSteps(t.db, c.auth, c.res.operationId, c.ws.dataDir);
    const before = await c.snap();
    const err = await abortTaskCreation(t.db, c.auth, 'cancel').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'creation_state_conflict' });
    expect(JSON.stringify((err as { detail: unknown }).detail)).toContain('armed');
    expect(await c.snap()).toBe(before);
  });

  it('an untouched plan does not abort: the predicate needs a permanently failed step (zero writes)', async () => {
    const c = await created();
    const before = await c.snap();
    const err = await abortTaskCreation(t.db, c.auth, 'caller_cancelled').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'creation_state_conflict' });
    expect((err as Error).message).toContain('permanently failed step');
    expect(await c.snap()).toBe(before);
  });

  it('a plan whose only touched step failed permanently aborts directly (no effect exists)', async () => {
    const c = await created({ start_agent: false, agent_profile_id: null, repositories: [], contributions: [] });
    const rows = await stepRows(t.db, c.res.operationId);
    const wsStep = rows.find((r) => r.kind === 'workspace_attachment')!;
    const w = await claimTaskCreationStep(
      t.db,
      c.auth,
      { kind: 'workspace_attachment', stepKey: wsStep.step_key },
      'w1',
    );
    await failTaskCreationStep(t.db, w, permanentFailure(w));
    const result = await abortTaskCreation(t.db, c.auth, 'caller_cancelled');
    expect(result.replayed).toBe(false);
    expect(await count(t.db, 'tasks', 'id = ?', [c.res.task.id])).toBe(0);
    await expectTyped(
      claimTaskCreationStep(t.db, c.auth, { kind: 'session_prepare', stepKey: 'x' }, 'w'),
      'creation_state_conflict',
    );
  });
});
