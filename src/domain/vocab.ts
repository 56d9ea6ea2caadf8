/**
 * Closed vocabularies of the task creation protocol.
 *
 * Every kind, state, action, disposition and outcome is declared once here as
 * a readonly tuple; the TypeScript union, the ajv enum and the database CHECK
 * constraint are all derived from the same tuple, so the three can never drift.
 */

export const STEP_KINDS = [
  'workspace_attachment',
  'attachment_claim',
  'fresh_branch_prepare',
  'remote_contribution_associate',
  'session_prepare',
  'launch_intent',
] as const;
export type StepKind = (typeof STEP_KINDS)[number];

/**
 * Kinds whose effect lives only in the ledger database: a worker claims,
 * performs and records each in one transaction (store/ledger-step.ts), and
 * one wake-up runs all of an operation's due ones in turn (coordinator/enqueue.ts).
 * Exactly these kinds' handlers implement `applyInClaim`.
 */
export const LEDGER_ONLY_KINDS: ReadonlySet<StepKind> = new Set([
  'workspace_attachment',
  'session_prepare',
  'launch_intent',
]);

/** Operation states (`task_creation_operations.state`). */
export const OPERATION_STATES = ['preparing', 'preparing-release', 'completing', 'completed', 'aborted'] as const;
export type OperationState = (typeof OPERATION_STATES)[number];

/** Live task creation states (`tasks.creation_state`); an aborted task has no live row. */
export const TASK_CREATION_STATES = ['preparing', 'completing', 'completed'] as const;
export type TaskCreationState = (typeof TASK_CREATION_STATES)[number];

/** Retained identity states (`task_identities.state`). */
export const IDENTITY_STATES = ['preparing', 'completed', 'aborted', 'deleted'] as const;
export type IdentityState = (typeof IDENTITY_STATES)[number];

export const STEP_STATES = [
  'planned',
  'armed',
  'running',
  'retry_wait',
  'unknown',
  'failed',
  'succeeded',
  'cancelled',
] as const;
export type StepState = (typeof STEP_STATES)[number];

export const STEP_DISPOSITIONS = ['none', 'workspace_deleted'] as const;
export type StepDisposition = (typeof STEP_DISPOSITIONS)[number];

/** Compensation sub-state of a step. `none`: nothing to undo. */
export const COMPENSATION_STATES = [
  'none',
  'required',
  'running',
  'retry_wait',
  'compensated',
  'transferred',
  'unknown',
] as const;
export type CompensationState = (typeof COMPENSATION_STATES)[number];

export const EVIDENCE_EFFECTS = ['present_exact', 'absent_proven', 'conflict', 'transferred'] as const;
export type EvidenceEffect = (typeof EVIDENCE_EFFECTS)[number];

export const START_POLICIES = ['none', 'immediate', 'deferred'] as const;
export type StartPolicy = (typeof START_POLICIES)[number];

export const WORKSPACE_POLICY_MODES = ['inherit_parent', 'shared_group', 'new_workspace'] as const;
export type WorkspacePolicyMode = (typeof WORKSPACE_POLICY_MODES)[number];

export const PROVIDERS = ['github', 'gitlab'] as const;
export type Provider = (typeof PROVIDERS)[number];

export const CONTRIBUTION_KINDS = ['pull_request', 'merge_request'] as const;
export type ContributionKind = (typeof CONTRIBUTION_KINDS)[number];

export const RECOVERY_ACTIONS = [
  'reconcile_unknown_step',
  'retry_compensation',
  'resume_preparing',
  'complete_preparing',
  'retry_preparing_release',
  'complete_completing',
  'abort_preparing',
  'reconcile_launch_dispatch',
  'retry_launch_dispatch',
  'transfer_launch_dispatch',
  'replay_terminal',
] as const;
export type RecoveryAction = (typeof RECOVERY_ACTIONS)[number];

export const DISPATCH_STATES = [
  'planned',
  'running',
  'unknown',
  'retry_wait',
  'succeeded',
  'cancelled',
  'transferred',
] as const;
export type DispatchState = (typeof DISPATCH_STATES)[number];

export const CLEANUP_JOB_STATES = ['pending', 'running', 'retry_wait', 'done', 'unknown'] as const;
export type CleanupJobState = (typeof CLEANUP_JOB_STATES)[number];

/** Outcomes of BeginTaskCreation; expected results, never thrown. */
export const BEGIN_OUTCOMES = ['Created', 'FoundSettled', 'FoundUnsettled', 'CreatedIdentityLost'] as const;
export type BeginOutcome = (typeof BEGIN_OUTCOMES)[number];

/** Sealed actor registry: each variant has exactly one auth mode and authority kind. */
export const ACTOR_VARIANTS = {
  api_principal: { auth_mode: 'bearer_token', authority_kind: 'api_token' },
  operator: { auth_mode: 'admin_token', authority_kind: 'admin_token' },
  internal_service: { auth_mode: 'service', authority_kind: 'service_account' },
  operation_recovery: { auth_mode: 'recovery_lease', authority_kind: 'creation_operation' },
} as const;
export type ActorVariant = keyof typeof ACTOR_VARIANTS;
export const ACTOR_VARIANT_NAMES = Object.keys(ACTOR_VARIANTS) as ActorVariant[];

export const TASK_LIFECYCLE_STATES = ['live', 'done', 'deleted'] as const;
export type TaskLifecycleState = (typeof TASK_LIFECYCLE_STATES)[number];

export const ATTACHMENT_OWNER_KINDS = ['staging', 'task'] as const;
export type AttachmentOwnerKind = (typeof ATTACHMENT_OWNER_KINDS)[number];

export const OUTBOX_EVENT_TYPES = ['task.created', 'task.deleted', 'task.dependencies_resolved'] as const;
export type OutboxEventType = (typeof OUTBOX_EVENT_TYPES)[number];

/** SQL `IN (...)` list for a CHECK constraint built from a vocabulary tuple. */
export function sqlInList(values: readonly string[]): string {
  return values.map((v) => `'${v.replace(/'/g, "''")}'`).join(', ');
}

/** A workspace deletion cascade (`workspace_deletions.state`): accepted and running, or every batch done. */
export const WORKSPACE_DELETION_STATES = ['running', 'completed'] as const;
export type WorkspaceDeletionState = (typeof WORKSPACE_DELETION_STATES)[number];

/** A recorded external-ID release (`external_id_releases.state`): claimed (its holder `preparing-release`), or applied. */
export const RELEASE_STATES = ['running', 'completed'] as const;
export type ReleaseState = (typeof RELEASE_STATES)[number];
