/**
 * Builds creations where some steps succeeded with their real effects and
 * one other step then failed permanently, so the succeeded steps' compensation
 * is `required`; plus effect dependencies with the real provider clients
 * (pointed at the fake provider server) and ledger readers.
 */
import type { Db } from '../../src/db/tx';
import type { StepKind } from '../../src/domain/vocab';
import { silentLogger } from '../../src/log';
import { afterAll, beforeAll } from 'vitest';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createProviderRegistry } from '../../src/providers/registry';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { EffectDeps, StepHandler } from '../../src/kinds/contract';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { failTaskCreationStep } from '../../src/store/step-results';
import type { OperationAuthority } from '../../src/store/types';
import { sql } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { begin, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { stageAttachmentFiles } from '../steps/support';

export function realDeps(db: Db, dataDir: string): EffectDeps {
  return { db, dataDir, providers: createProviderRegistry({ timeoutMs: 5000 }), log: silentLogger(), timeoutMs: 5000 };
}

export async function seeded(db: Db, provider: FakeProviderServer, pr: number): Promise<SeededWorkspace> {
  const ws = await seedWorkspace(db);
  await stageAttachmentFiles(db, ws);
  provider.addPullRequest('acme/app', pr);
  await sql(db, 'UPDATE repositories SET remote_slug = ? WHERE id = ?', ['acme/app', ws.repositoryId]);
  await sql(db, 'UPDATE provider_connections SET base_url = ? WHERE id = ?', [provider.githubBaseUrl, ws.connectionId]);
  return ws;
}

export function bodyFor(ws: SeededWorkspace, kinds: StepKind[], pr: number): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (kinds.includes('workspace_attachment')) {
    body.workspace_policy = { mode: 'shared_group', group_id: ws.groupId, environment_id: ws.sharedEnvironmentId };
  }
  if (kinds.includes('attachment_claim')) body.attachments = ws.attachmentIds;
  if (kinds.includes('fresh_branch_prepare')) body.repositories = [{ repository_id: ws.repositoryId }];
  if (kinds.includes('remote_contribution_associate')) {
    body.contributions = [
      {
        provider: 'github',
        connection_id: ws.connectionId,
        repository_id: ws.repositoryId,
        contribution_kind: 'pull_request',
        contribution_id: String(pr),
      },
    ];
  }
  if (kinds.includes('session_prepare')) {
    body.start_agent = true;
    body.agent_profile_id = ws.agentProfileId;
  }
  return body;
}

export interface FailedCreation {
  ws: SeededWorkspace;
  deps: EffectDeps;
  auth: OperationAuthority;
  operationId: string;
  taskId: string;
  steps: Awaited<ReturnType<typeof stepRows>>;
  step(kind: StepKind): { id: string; step_key: string };
}

/**
 * Begins a creation with `succeed` and `fail` kinds, performs every `succeed`
 * step with its real handler, then fails the `fail` step permanently (its
 * effect proven absent).
 */
export async function failedCreation(
  db: Db,
  ws: SeededWorkspace,
  succeed: StepKind[],
  fail: StepKind,
  pr: number,
  extra: Record<string, unknown> = {},
): Promise<FailedCreation> {
  const deps = realDeps(db, ws.dataDir);
  const res = await begin(db, ws, { ...bodyFor(ws, [...succeed, fail], pr), ...extra });
  if (res.outcome !== 'Created') throw new Error(`begin returned ${res.outcome}`);
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  const rows = await stepRows(db, res.operationId);
  for (const kind of succeed) {
    const row = rows.find((r) => r.kind === kind)!;
    const claim = await claimTaskCreationStep(db, auth, { kind, stepKey: row.step_key }, 'worker-1');
    const state = await (defaultStepHandlers[kind] as StepHandler).perform(deps, claim, async () => {});
    if (state !== 'succeeded') throw new Error(`${kind} ended ${state}`);
  }
  const failing = rows.find((r) => r.kind === fail)!;
  const claim = await claimTaskCreationStep(db, auth, { kind: fail, stepKey: failing.step_key }, 'worker-1');
  expectState(await failTaskCreationStep(db, claim, permanentFailure(claim)), 'failed');
  const steps = await stepRows(db, res.operationId);
  return {
    ws,
    deps,
    auth,
    operationId: res.operationId,
    taskId: res.task.id,
    steps,
    step: (kind) => steps.find((s) => s.kind === kind)!,
  };
}

function expectState(actual: string, want: string): void {
  if (actual !== want) throw new Error(`expected ${want}, got ${actual}`);
}

export async function compensation(db: Db, stepId: string) {
  const [row] = await sql<{
    compensation_state: string;
    cleanup_job_id: string | null;
    compensation_evidence_json: string | null;
  }>(
    db,
    'SELECT compensation_state, cleanup_job_id, compensation_evidence_json FROM task_creation_steps WHERE id = ?',
    [stepId],
  );
  return {
    state: row!.compensation_state,
    jobId: row!.cleanup_job_id,
    proof: row!.compensation_evidence_json
      ? (JSON.parse(row!.compensation_evidence_json) as Record<string, any>)
      : null,
  };
}

export async function cleanupJob(db: Db, jobId: string) {
  const [row] = await sql<{ state: string; kind: string; reason: string; error_code: string | null; step_id: string }>(
    db,
    'SELECT state, kind, reason, error_code, step_id FROM task_resource_cleanup_jobs WHERE id = ?',
    [jobId],
  );
  return row;
}

export const recovery = (operationId: string): OperationAuthority => ({
  kind: 'operation',
  operationId,
  actor: 'recovery',
});

/**
 * One fake GitHub/GitLab server for the calling test file: started before its
 * tests, closed after them. `server` is there once the file's tests run.
 */
export function useFakeProvider(): { readonly server: FakeProviderServer } {
  let server: FakeProviderServer | undefined;
  beforeAll(async () => {
    server = await startFakeProviderServer();
  });
  afterAll(async () => {
    await server?.close();
  });
  return {
    get server() {
      if (!server) throw new Error('the fake provider starts in beforeAll');
      return server;
    },
  };
}
