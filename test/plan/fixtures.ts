/**
 * Shared fixtures of the plan tests: fixed UUIDs, a deterministic `newId`, a
 * full plan context, and helpers to count steps by kind.
 */
import type { CreationPlan } from '../../src/canonical/types';
import type { StepKind } from '../../src/domain/vocab';
import type { CreateTaskRequest } from '../../src/plan/create-request';
import { validateCreateRequest } from '../../src/plan/create-request';
import type { PlanContext } from '../../src/plan/plan-types';

/** A lowercase v4 UUID whose last group encodes `n` under `prefix` (1 hex digit). */
export function uuid(prefix: string, n: number): string {
  return `${prefix.repeat(8)}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
}

export const WS = uuid('a', 1);
export const TASK = uuid('b', 1);
export const PARENT = uuid('b', 2);
export const BLOCKER_1 = uuid('b', 3);
export const BLOCKER_2 = uuid('b', 4);
export const WORKFLOW = uuid('c', 1);
export const WORKFLOW_STEP = uuid('c', 2);
export const REPO_A = uuid('d', 1);
export const REPO_B = uuid('d', 2);
export const REPO_C = uuid('d', 3);
export const ATT_1 = uuid('e', 1);
export const ATT_2 = uuid('e', 2);
export const GROUP = uuid('f', 1);
export const PARENT_GROUP = uuid('f', 2);
export const ENV = uuid('1', 1);
export const PARENT_ENV = uuid('1', 2);
export const PROFILE = uuid('2', 1);
export const CONN_GH = uuid('3', 1);
export const CONN_GL = uuid('3', 2);

/** Deterministic ID generator: 9xxxxxxx-...-<counter>. */
export function idSeq(start = 1): () => string {
  let n = start;
  return () => uuid('9', n++);
}

export const SHA_A = 'a'.repeat(40);
export const SHA_B = 'b'.repeat(40);

export function context(overrides: Partial<PlanContext> = {}): PlanContext {
  return {
    taskId: TASK,
    workspaceId: WS,
    workflow: { workflow_id: WORKFLOW, workflow_step_id: WORKFLOW_STEP },
    parent: null,
    environments: {
      [ENV]: { id: ENV, repository_ids: [REPO_B, REPO_A] },
      [PARENT_ENV]: { id: PARENT_ENV, repository_ids: [REPO_C] },
    },
    groups: [GROUP, PARENT_GROUP],
    repositories: {
      [REPO_A]: { id: REPO_A, name: 'frontend', path: '/src/frontend', default_branch: 'main', base_commit: SHA_A },
      [REPO_B]: { id: REPO_B, name: 'back end', path: '/src/backend', default_branch: 'develop', base_commit: SHA_B },
      [REPO_C]: { id: REPO_C, name: 'docs', path: '/src/docs', default_branch: 'main', base_commit: SHA_A },
    },
    attachments: {
      [ATT_1]: { id: ATT_1, staging_owner_id: 'upload:alice', content_sha256: '1'.repeat(64), size: 10 },
      [ATT_2]: { id: ATT_2, staging_owner_id: 'upload:alice', content_sha256: '2'.repeat(64), size: 20 },
    },
    agentProfile: { id: PROFILE, executor_kind: 'local', executor: { kind: 'local', command: ['agent', '--yes'] } },
    dataDir: '/var/lib/taskledger',
    newId: idSeq(),
    ...overrides,
  };
}

/** A validated request from a partial body (workspace and title filled in). */
export function request(body: Record<string, unknown> = {}): CreateTaskRequest {
  return validateCreateRequest({ workspace_id: WS, title: 'Fix the flaky test', ...body });
}

export function countByKind(plan: CreationPlan): Record<StepKind, number> {
  const out: Record<StepKind, number> = {
    workspace_attachment: 0,
    attachment_claim: 0,
    fresh_branch_prepare: 0,
    remote_contribution_associate: 0,
    session_prepare: 0,
    launch_intent: 0,
  };
  for (const s of plan.steps) out[s.kind]++;
  return out;
}

/** Expects `fn` to throw a ValidationError and returns it. */
export function catchError(fn: () => unknown): { code: string; field: string; message: string } {
  try {
    fn();
  } catch (err) {
    return err as { code: string; field: string; message: string };
  }
  throw new Error('expected an error, none was thrown');
}
