/**
 * Test helpers for the real step effects: effect dependencies pointing at the
 * seeded data directory, staged attachment files whose bytes match their
 * rows, step claims and rows, snapshots of every effect table of a task, and
 * a driver that runs the real handlers for every step of an operation.
 */
import { createHash, randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import { evidenceHash } from '../../src/canonical/hash';
import type { StepEvidence } from '../../src/canonical/types';
import { validateStepEvidence } from '../../src/canonical/validate';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { StepKind } from '../../src/domain/vocab';
import type { Db } from '../../src/db/tx';
import { silentLogger } from '../../src/log';
import type { ProviderRegistry } from '../../src/providers/types';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { freshBranchPrepareHandler } from '../../src/kinds/fresh-branch-prepare/step';
import { launchIntentHandler } from '../../src/kinds/launch-intent/step';
import { sessionPrepareHandler } from '../../src/kinds/session-prepare/step';
import type { EffectDeps, StepHandler } from '../../src/kinds/contract';
import { ledgerKindsOf } from '../../src/coordinator/step-worker';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { claimAndApplyLedgerSteps, type LedgerKinds } from '../../src/store/ledger-step';
import { workspaceAttachmentHandler } from '../../src/kinds/workspace-attachment/step';
import { stagedAttachmentPath } from '../../src/storage/paths';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import { STEP_COLUMNS } from '../../src/store/step-rows';
import type { OperationAuthority, StepClaim, StepRow } from '../../src/store/types';
import { sql } from '../support/db';
import { begin, stepRows } from '../support/ledger';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';

/** Providers are not used by these five kinds; any call is a test bug. */
const unusedProvider = new Proxy(
  {},
  {
    get: () => () => {
      throw new Error('no provider is used by this step kind');
    },
  },
);
const providers = { github: unusedProvider, gitlab: unusedProvider } as unknown as ProviderRegistry;

export function effectDeps(db: Db, dataDir: string, timeoutMs = 15_000): EffectDeps {
  return { db, dataDir, providers, log: silentLogger(), timeoutMs };
}

export const HANDLERS: Partial<Record<StepKind, StepHandler>> = {
  workspace_attachment: workspaceAttachmentHandler as StepHandler,
  attachment_claim: attachmentClaimHandler as StepHandler,
  fresh_branch_prepare: freshBranchPrepareHandler as StepHandler,
  session_prepare: sessionPrepareHandler as StepHandler,
  launch_intent: launchIntentHandler as StepHandler,
};

export const noHeartbeat = async (): Promise<void> => {};

export function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/**
 * Writes a staged file for every seeded attachment and rebinds its row's
 * content hash and size to those bytes (before Begin, which plans them).
 */
export async function stageAttachmentFiles(db: Db, ws: SeededWorkspace): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for (const id of ws.attachmentIds) {
    const bytes = randomBytes(64 + out.size * 7);
    const path = stagedAttachmentPath(ws.dataDir, ws.workspaceId, id);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, bytes);
    await sql(db, 'UPDATE task_message_attachments SET content_sha256 = ?, size = ?, storage_path = ? WHERE id = ?', [
      sha256(bytes),
      bytes.length,
      path,
      id,
    ]);
    out.set(id, bytes);
  }
  return out;
}

export async function seedWithFiles(db: Db) {
  const ws = await seedWorkspace(db);
  const files = await stageAttachmentFiles(db, ws);
  return { ws, files, deps: effectDeps(db, ws.dataDir) };
}

export async function createTask(db: Db, ws: SeededWorkspace, body: Record<string, unknown>) {
  const res = await begin(db, ws, body);
  if (res.outcome !== 'Created') throw new Error(`begin returned ${res.outcome}`);
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  return { res, auth, taskId: res.task.id, operationId: res.operationId };
}

export async function claimKind(db: Db, auth: OperationAuthority, operationId: string, kind: StepKind, owner = 'w1') {
  const rows = await stepRows(db, operationId);
  const row = rows.find((r) => r.kind === kind);
  if (!row) throw new Error(`no ${kind} step`);
  return claimTaskCreationStep(db, auth, { kind, stepKey: row.step_key }, owner);
}

export async function loadStep(db: Db, stepId: string): Promise<StepRow> {
  const [row] = await sql<StepRow>(db, `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE id = ?`, [stepId]);
  if (!row) throw new Error(`no step ${stepId}`);
  return {
    ...row,
    generation: Number(row.generation),
    attempt: Number(row.attempt),
    compensation_generation: Number(row.compensation_generation),
  };
}

export async function stepState(db: Db, stepId: string) {
  const [row] = await sql<{ state: string; error_code: string | null; evidence_json: string | null }>(
    db,
    'SELECT state, error_code, evidence_json FROM task_creation_steps WHERE id = ?',
    [stepId],
  );
  return { ...row!, evidence: row!.evidence_json ? (JSON.parse(row!.evidence_json) as Record<string, any>) : null };
}

/** Every ledger and effect row of one creation, for before/after equality. */
export async function effectSnapshot(db: Db, operationId: string, taskId: string): Promise<string> {
  const parts = await Promise.all([
    sql(db, 'SELECT * FROM task_creation_steps WHERE operation_id = ? ORDER BY id', [operationId]),
    sql(db, 'SELECT * FROM workspace_group_members WHERE task_id = ? ORDER BY group_id', [taskId]),
    sql(db, 'SELECT * FROM task_blockers WHERE task_id = ? ORDER BY blocker_task_id', [taskId]),
    sql(db, 'SELECT * FROM task_environment_bindings WHERE task_id = ?', [taskId]),
    sql(db, 'SELECT * FROM task_environment_repos WHERE operation_id = ? ORDER BY id', [operationId]),
    sql(db, 'SELECT * FROM task_message_attachments WHERE task_id = ? OR claimed_by_operation_id = ? ORDER BY id', [
      taskId,
      operationId,
    ]),
    sql(db, 'SELECT * FROM task_sessions WHERE task_id = ? ORDER BY id', [taskId]),
    sql(db, 'SELECT * FROM task_resource_markers WHERE task_id = ? ORDER BY resource_key', [taskId]),
  ]);
  return JSON.stringify(parts);
}

/** Claims every step and runs its real handler (launch intent last), as a worker would. */
export async function driveWithHandlers(db: Db, auth: OperationAuthority, operationId: string, deps: EffectDeps) {
  const rows = await stepRows(db, operationId);
  const ordered = [
    ...rows.filter((r) => r.kind !== 'launch_intent'),
    ...rows.filter((r) => r.kind === 'launch_intent'),
  ];
  const states: Record<string, string> = {};
  for (const row of ordered) {
    const handler = HANDLERS[row.kind as StepKind];
    if (!handler) throw new Error(`no handler for ${row.kind} in these tests`);
    const claim: StepClaim = await claimTaskCreationStep(
      db,
      auth,
      { kind: row.kind as StepKind, stepKey: row.step_key },
      'w1',
    );
    states[row.kind] = await handler.perform(deps, claim, noHeartbeat);
    if (row.kind !== 'launch_intent' && states[row.kind] !== 'succeeded') {
      // Said here, with the step's own error: the launch intent's claim would only refuse without a reason.
      const st = await stepState(db, claim.stepId);
      throw new Error(`${row.kind} ended ${states[row.kind]}: ${st.error_code} ${JSON.stringify(st.evidence)}`);
    }
  }
  return states;
}

export function git(dir: string, ...args: string[]): string {
  return execFileSync('git', ['-C', dir, ...args], { stdio: 'pipe' }).toString();
}

export function executorsRunningInsert(db: Db) {
  const now = db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
  return `INSERT INTO executors_running (id, session_id, task_id, workspace_id, dispatch_claim_id, runtime_handle, pid, state, started_at, updated_at)
          VALUES (?, ?, ?, ?, ?, '{}', 4242, 'running', ${now}, ${now})`;
}

/**
 * A ledger-only step recorded in its one claim transaction: first claim
 * (generation and attempt 1), lease released, and valid `present_exact`
 * evidence whose stored hash is the hash of its canonical bytes.
 */
export async function expectRecordedInOneClaim(db: Db, claim: StepClaim, outcome: { state: string }): Promise<void> {
  expect(claim.generation).toBe(1);
  const step = await loadStep(db, claim.stepId);
  expect(step).toMatchObject({ state: outcome.state, generation: 1, attempt: 1, lease_owner: null });
  const evidence = JSON.parse(step.evidence_json!) as StepEvidence;
  expect(() => validateStepEvidence(evidence)).not.toThrow();
  expect(evidence.effect).toBe('present_exact');
  expect(step.evidence_sha256).toBe(evidenceHash(evidence));
}

/** Every kind whose handler can join a ledger batch (store/ledger-step.ts), as a fleet worker passes them. */
export const LEDGER_KINDS: LedgerKinds = ledgerKindsOf(defaultStepHandlers);

/**
 * A task with an agent in its workspace's shared group (staged files seeded): its workspace attachment, session
 * and launch intent are ledger-only steps. `extra` adds to the create body.
 */
export async function createGroupTask(db: Db, extra: (ws: SeededWorkspace) => Record<string, unknown> = () => ({})) {
  const { ws } = await seedWithFiles(db);
  const c = await createTask(db, ws, {
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    ...extra(ws),
  });
  return { ws, c };
}

/**
 * A group task's whole ledger batch as the inline worker runs it (session prepare's wake-up, the other ledger
 * steps with it, Complete's phase A before COMMIT): the task, the worker's authority and the batch's result.
 */
export async function groupTaskBatchWithPhaseA(db: Db) {
  const { c } = await createGroupTask(db);
  const row = (await stepRows(db, c.operationId)).find((r) => r.kind === 'session_prepare')!;
  const auth = { kind: 'operation', operationId: c.operationId, actor: 'w1' } as const;
  const ref = { kind: 'session_prepare' as StepKind, stepKey: row.step_key };
  const batch = await claimAndApplyLedgerSteps(db, auth, ref, 'w1', 30_000, LEDGER_KINDS, { phaseA: true });
  return { c, auth, batch };
}

/** Begin of the Git shape's creation: an agent, one fresh branch, the workspace's shared group. */
export async function beginGitCreation(db: Db) {
  const ws = await seedWorkspace(db);
  const res = await begin(db, ws, {
    workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    repositories: [{ repository_id: ws.repositoryId, fresh_branch: true }],
    start_agent: true,
    agent_profile_id: ws.agentProfileId,
  });
  expect(res.outcome).toBe('Created');
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  return { ws, res, auth };
}
