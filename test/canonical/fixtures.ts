/**
 * Valid canonical documents for the canonical-bindings tests. Every builder
 * returns a fresh deep copy, so a test can mutate it freely.
 */
import type {
  ActorBindingDocument,
  CompensationProof,
  CreationPlan,
  StepEvidence,
  StepFailure,
  StepRequestByKind,
} from '../../src/canonical/types';
import type { StepKind } from '../../src/domain/vocab';

export const ID = {
  task: '11111111-1111-4111-8111-111111111111',
  workspace: '22222222-2222-4222-8222-222222222222',
  workflow: '33333333-3333-4333-8333-333333333333',
  workflowStep: '44444444-4444-4444-8444-444444444444',
  parent: '55555555-5555-4555-9555-555555555555',
  group: '66666666-6666-4666-a666-666666666666',
  blockerA: '77777777-7777-4777-b777-777777777771',
  blockerB: '77777777-7777-4777-b777-777777777772',
  environment: '88888888-8888-4888-8888-888888888888',
  repoA: '99999999-9999-4999-8999-999999999991',
  repoB: '99999999-9999-4999-8999-999999999992',
  attachmentA: 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaa1',
  attachmentB: 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaa2',
  envRepo: 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb',
  taskEnvironment: 'cccccccc-cccc-4ccc-8ccc-cccccccccccc',
  connection: 'dddddddd-dddd-4ddd-8ddd-dddddddddddd',
  session: 'eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee',
  agentProfile: 'ffffffff-ffff-4fff-bfff-ffffffffffff',
  operation: '01234567-89ab-4cde-8f01-23456789abcd',
  stepId: '01234567-89ab-4cde-8f01-23456789abce',
  cleanupJob: '01234567-89ab-4cde-8f01-23456789abcf',
} as const;

/** A hash-shaped value: 64 copies of one hex digit. */
export const h = (digit: string): string => digit.repeat(64);
export const COMMIT = 'c0ffee'.padEnd(40, '0');
export const OBSERVED_AT = '2026-12-02T16:03:12.123Z';

const REQUESTS: StepRequestByKind = {
  workspace_attachment: {
    task_id: ID.task,
    workspace_id: ID.workspace,
    parent_id: ID.parent,
    mode: 'shared_group',
    group_id: ID.group,
    member_ids: [ID.task],
    blocker_ids: [ID.blockerA, ID.blockerB],
    environment_id: ID.environment,
    repository_ids: [ID.repoA, ID.repoB],
  },
  attachment_claim: {
    task_id: ID.task,
    workspace_id: ID.workspace,
    attachments: [
      { attachment_id: ID.attachmentA, staging_owner_id: 'upload-session-1', content_sha256: h('1'), size: 0 },
      { attachment_id: ID.attachmentB, staging_owner_id: 'upload-session-1', content_sha256: h('2'), size: 1048576 },
    ],
  },
  fresh_branch_prepare: {
    task_id: ID.task,
    workspace_id: ID.workspace,
    repository_id: ID.repoA,
    task_environment_id: ID.taskEnvironment,
    task_environment_repo_id: ID.envRepo,
    resource_key: `worktree:${ID.envRepo}`,
    canonical_path_sha256: h('3'),
    branch: 'task/fix-login-1111',
    base_commit: COMMIT,
  },
  remote_contribution_associate: {
    provider: 'github',
    workspace_id: ID.workspace,
    repository_id: ID.repoA,
    contribution_kind: 'pull_request',
    contribution_id: '42',
    connection_id: ID.connection,
    task_id: ID.task,
  },
  session_prepare: {
    task_id: ID.task,
    workspace_id: ID.workspace,
    session_id: ID.session,
    task_environment_id: ID.taskEnvironment,
    executor_id: 'local',
    executor_profile_id: 'default',
    agent_profile_id: ID.agentProfile,
    launch_config_sha256: h('4'),
    resource_keys: [`session:${ID.session}`],
  },
  launch_intent: {
    task_id: ID.task,
    workspace_id: ID.workspace,
    session_id: ID.session,
    agent_profile_id: ID.agentProfile,
    executor_id: 'local',
    executor_profile_id: 'default',
    launch_config_sha256: h('4'),
  },
};

export function request<K extends StepKind>(kind: K): StepRequestByKind[K] {
  return structuredClone(REQUESTS[kind]);
}

export const STEP_KEYS: Record<StepKind, string> = {
  attachment_claim: h('a'),
  fresh_branch_prepare: ID.envRepo,
  launch_intent: ID.session,
  remote_contribution_associate: `github:${ID.connection}:pull_request:42`,
  session_prepare: ID.session,
  workspace_attachment: h('b'),
};

/** An immediate plan with one step of every kind, in canonical (kind, step_key) order. */
export function plan(): CreationPlan {
  const kinds = Object.keys(STEP_KEYS).sort() as StepKind[];
  return {
    version: 1,
    task_id: ID.task,
    workspace_id: ID.workspace,
    workflow_id: ID.workflow,
    workflow_step_id: ID.workflowStep,
    parent_id: ID.parent,
    request_sha256: h('5'),
    start_policy: 'immediate',
    deferred_launch: null,
    database_rows: [
      { table: 'task_identities', key: ID.task, row_sha256: h('6') },
      { table: 'task_repositories', key: `${ID.task}:${ID.repoA}`, row_sha256: h('7') },
      { table: 'tasks', key: ID.task, row_sha256: h('8') },
    ],
    steps: kinds.map((kind) => ({ kind, step_key: STEP_KEYS[kind], request: request(kind) })) as CreationPlan['steps'],
  };
}

export function actor(): ActorBindingDocument {
  return {
    version: 1,
    variant: 'api_principal',
    principal_id: 'alice@example.com',
    workspace_id: ID.workspace,
    auth_mode: 'bearer_token',
    authority_kind: 'api_token',
    authority_id: 'tok_0001',
    authority_revision: 3,
    lease_generation: null,
  };
}

const OBSERVATIONS: Record<StepKind, Record<string, unknown>> = {
  workspace_attachment: {
    policy_mode: 'shared_group',
    group_member_rows: [{ group_id: ID.group, task_id: ID.task, role: 'member', row_sha256: h('1') }],
    blocker_rows: [
      { task_id: ID.task, blocker_task_id: ID.blockerA, row_sha256: h('2') },
      { task_id: ID.task, blocker_task_id: ID.blockerB, row_sha256: h('3') },
    ],
    environment_binding: { environment_id: ID.environment, task_id: ID.task, row_sha256: h('4') },
    environment_repo_rows: [
      { id: ID.envRepo, repository_id: ID.repoA, row_sha256: h('5') },
      { id: ID.taskEnvironment, repository_id: ID.repoB, row_sha256: h('6') },
    ],
    owner_operation_id: ID.operation,
    step_generation: 1,
  },
  attachment_claim: {
    operation_id: ID.operation,
    attachments: [
      {
        attachment_id: ID.attachmentA,
        prior_owner_kind: 'staging',
        staging_owner_id: 'upload-session-1',
        current_owner_kind: 'task',
        task_id: ID.task,
        content_sha256: h('1'),
        size: 0,
        row_sha256: h('7'),
      },
      {
        attachment_id: ID.attachmentB,
        prior_owner_kind: 'staging',
        staging_owner_id: 'upload-session-1',
        current_owner_kind: 'task',
        task_id: ID.task,
        content_sha256: h('2'),
        size: 1048576,
        row_sha256: h('8'),
      },
    ],
  },
  fresh_branch_prepare: {
    worktree_path: '/var/lib/taskledger/worktrees/1111',
    canonical_path_sha256: h('3'),
    branch: 'task/fix-login-1111',
    head_commit: COMMIT,
    base_commit: COMMIT,
    registered: true,
    marker: {
      operation_id: ID.operation,
      step_id: ID.stepId,
      resource_key: `worktree:${ID.envRepo}`,
      marker_sha256: h('9'),
    },
    environment_repo_row_sha256: h('a'),
  },
  remote_contribution_associate: {
    association_row_sha256: h('b'),
    provider_handle: 'github:pr:42',
    provider_response_sha256: h('c'),
    idempotency_key: h('d'),
    ownership_marker: h('e'),
  },
  session_prepare: {
    session_row_sha256: h('f'),
    resource_markers: [{ resource_key: `session:${ID.session}`, marker_sha256: h('0') }],
    runtime_absent: true,
  },
  launch_intent: { intent_sha256: h('1'), dispatched: false },
};

export function presentObservation(kind: StepKind): Record<string, unknown> {
  return structuredClone(OBSERVATIONS[kind]);
}

export function rowSet(): { reason: string; rows: { table: string; key: string; row_sha256: string | null }[] } {
  return {
    reason: 'rows_absent',
    rows: [
      { table: 'task_blockers', key: `${ID.task}:${ID.blockerA}`, row_sha256: null },
      { table: 'workspace_group_members', key: `${ID.group}:${ID.task}`, row_sha256: h('2') },
    ],
  };
}

export function evidence(kind: StepKind, effect: StepEvidence['effect'] = 'present_exact'): StepEvidence {
  return {
    version: 1,
    kind,
    step_key: STEP_KEYS[kind],
    request_sha256: h('9'),
    observation: effect === 'present_exact' ? presentObservation(kind) : rowSet(),
    observed_at: OBSERVED_AT,
    effect,
  };
}

export function failure(): StepFailure {
  return {
    class: 'permanent',
    code: 'branch_exists',
    message: 'branch task/fix-login-1111 already exists and is not ours',
    evidence: evidence('fresh_branch_prepare', 'absent_proven'),
  };
}

export function compensation(): CompensationProof {
  return {
    version: 1,
    kind: 'workspace_attachment',
    step_key: STEP_KEYS.workspace_attachment,
    request_sha256: h('9'),
    outcome: 'transferred',
    cleanup_job_id: ID.cleanupJob,
    observation: rowSet(),
    observed_at: OBSERVED_AT,
  };
}
