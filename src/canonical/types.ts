/**
 * The canonical documents of the task creation protocol, as TypeScript types.
 *
 * Each type has exactly one closed ajv schema in `schemas/` (extra or unknown
 * fields are invalid). UUIDs are lowercase RFC 4122 strings, hashes are 64
 * lowercase hex characters, absent optionals are `null` (never omitted), and
 * every list is sorted by its canonical key with no duplicates.
 */
import type {
  ActorVariant,
  ContributionKind,
  EvidenceEffect,
  Provider,
  StartPolicy,
  StepKind,
  WorkspacePolicyMode,
} from '../domain/vocab';

export type Uuid = string;
export type Sha256Hex = string;

// ---------------------------------------------------------------- step requests

export interface WorkspaceAttachmentRequest {
  task_id: Uuid;
  workspace_id: Uuid;
  parent_id: Uuid | null;
  mode: WorkspacePolicyMode;
  group_id: Uuid | null;
  /** Task IDs whose group-membership rows this step inserts (normally `[task_id]` when `group_id` is set). */
  member_ids: Uuid[];
  /** Predecessors: one `task_blockers` edge per ID. */
  blocker_ids: Uuid[];
  /** Shared or inherited environment the task is bound to. */
  environment_id: Uuid | null;
  /** Repositories of that environment, as observed when planning. */
  repository_ids: Uuid[];
}

export interface AttachmentClaimItem {
  attachment_id: Uuid;
  staging_owner_id: string;
  content_sha256: Sha256Hex;
  size: number;
}

export interface AttachmentClaimRequest {
  task_id: Uuid;
  workspace_id: Uuid;
  attachments: AttachmentClaimItem[];
}

export interface FreshBranchPrepareRequest {
  task_id: Uuid;
  workspace_id: Uuid;
  repository_id: Uuid;
  task_environment_id: Uuid;
  task_environment_repo_id: Uuid;
  resource_key: string;
  canonical_path_sha256: Sha256Hex;
  branch: string;
  /** Full commit ID (40 hex for SHA-1 repositories, 64 for SHA-256). */
  base_commit: string;
}

export interface RemoteContributionAssociateRequest {
  provider: Provider;
  workspace_id: Uuid;
  repository_id: Uuid;
  contribution_kind: ContributionKind;
  contribution_id: string;
  connection_id: Uuid;
  task_id: Uuid;
}

export interface SessionPrepareRequest {
  task_id: Uuid;
  workspace_id: Uuid;
  session_id: Uuid;
  task_environment_id: Uuid;
  executor_id: string;
  executor_profile_id: string;
  agent_profile_id: Uuid;
  launch_config_sha256: Sha256Hex;
  resource_keys: string[];
}

export interface LaunchIntentRequest {
  task_id: Uuid;
  workspace_id: Uuid;
  session_id: Uuid;
  agent_profile_id: Uuid;
  executor_id: string;
  executor_profile_id: string;
  launch_config_sha256: Sha256Hex;
}

export interface StepRequestByKind {
  workspace_attachment: WorkspaceAttachmentRequest;
  attachment_claim: AttachmentClaimRequest;
  fresh_branch_prepare: FreshBranchPrepareRequest;
  remote_contribution_associate: RemoteContributionAssociateRequest;
  session_prepare: SessionPrepareRequest;
  launch_intent: LaunchIntentRequest;
}

export type StepRequest = StepRequestByKind[StepKind];

export type PlanStep = {
  [K in StepKind]: { kind: K; step_key: string; request: StepRequestByKind[K] };
}[StepKind];

// ---------------------------------------------------------------- plan

export interface PlanDatabaseRow {
  /** Table Begin inserts into (`tasks`, `task_identities`, `task_repositories`, `task_environments`). */
  table: string;
  /** Canonical primary key, e.g. the UUID or `task_id:repository_id`. */
  key: string;
  /** `rowHash()` of the row document Begin inserts. */
  row_sha256: Sha256Hex;
}

/** The start-when-unblocked intent a `deferred` plan records instead of session/launch steps. */
export interface DeferredLaunch {
  session_id: Uuid;
  agent_profile_id: Uuid;
  executor_id: string;
  executor_profile_id: string;
  launch_config_sha256: Sha256Hex;
}

export interface CreationPlan {
  version: 1;
  task_id: Uuid;
  workspace_id: Uuid;
  workflow_id: Uuid | null;
  workflow_step_id: Uuid | null;
  parent_id: Uuid | null;
  /** `createRequestHash()` of the validated create request. */
  request_sha256: Sha256Hex;
  start_policy: StartPolicy;
  /** Non-null exactly when `start_policy` is `deferred` and an agent profile resolved. */
  deferred_launch: DeferredLaunch | null;
  /** Sorted by `(table, key)`. */
  database_rows: PlanDatabaseRow[];
  /** Sorted by `(kind, step_key)`. */
  steps: PlanStep[];
}

// ---------------------------------------------------------------- actor

export interface ActorBindingDocument {
  version: 1;
  variant: ActorVariant;
  principal_id: string;
  workspace_id: Uuid;
  auth_mode: string;
  authority_kind: string;
  authority_id: string;
  authority_revision: number;
  lease_generation: number | null;
}

// ---------------------------------------------------------------- evidence

export interface StepEvidence {
  version: 1;
  kind: StepKind;
  step_key: string;
  request_sha256: Sha256Hex;
  /** Per-kind closed observation object (see `schemas/observations.ts`). */
  observation: Record<string, unknown>;
  /** RFC 3339 UTC with milliseconds, e.g. `2026-12-02T16:03:12.123Z`. */
  observed_at: string;
  effect: EvidenceEffect;
}

/** What a worker reports when a step did not succeed. */
export interface StepFailure {
  /** permanent: no effect happened and none will (`failed`, needs `absent_proven` evidence);
   *  transient: safe to retry (`retry_wait`); ambiguous: effect may exist (`unknown`). */
  class: 'permanent' | 'transient' | 'ambiguous';
  code: string;
  message: string;
  evidence: StepEvidence | null;
}

export interface CompensationProof {
  version: 1;
  kind: StepKind;
  step_key: string;
  request_sha256: Sha256Hex;
  outcome: 'compensated' | 'transferred' | 'unknown' | 'retry_wait';
  cleanup_job_id: Uuid | null;
  observation: Record<string, unknown>;
  observed_at: string;
}
