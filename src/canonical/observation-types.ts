/**
 * TypeScript shapes of the closed evidence observations (`schemas/observations.ts`
 * is the normative schema; these types mirror it field for field). Lists are
 * sorted and unique by the key named on each field.
 */
import type { EvidenceEffect, StepKind, WorkspacePolicyMode } from '../domain/vocab';
import type { Sha256Hex, Uuid } from './types';
import type { GroupMemberRole } from './schemas/observations';

/** Shared observation of `absent_proven`, `conflict`, `transferred` and every CompensationProof. */
export interface RowSetObservation {
  reason: string;
  /** Sorted by `(table, key)`; `row_sha256: null` means proven absent. */
  rows: { table: string; key: string; row_sha256: Sha256Hex | null }[];
}

export interface WorkspaceAttachmentObservation {
  policy_mode: WorkspacePolicyMode;
  /** Sorted by `(group_id, task_id)`. */
  group_member_rows: { group_id: Uuid; task_id: Uuid; role: GroupMemberRole; row_sha256: Sha256Hex }[];
  /** Sorted by `(task_id, blocker_task_id)`. */
  blocker_rows: { task_id: Uuid; blocker_task_id: Uuid; row_sha256: Sha256Hex }[];
  environment_binding: { environment_id: Uuid; task_id: Uuid; row_sha256: Sha256Hex } | null;
  /** Sorted by `id`. */
  environment_repo_rows: { id: Uuid; repository_id: Uuid; row_sha256: Sha256Hex }[];
  owner_operation_id: Uuid;
  step_generation: number;
}

export interface AttachmentClaimObservation {
  operation_id: Uuid;
  /** Sorted by `attachment_id`; at least one. */
  attachments: {
    attachment_id: Uuid;
    prior_owner_kind: 'staging';
    staging_owner_id: string;
    current_owner_kind: 'task';
    task_id: Uuid;
    content_sha256: Sha256Hex;
    size: number;
    row_sha256: Sha256Hex;
  }[];
}

export interface FreshBranchPrepareObservation {
  worktree_path: string;
  canonical_path_sha256: Sha256Hex;
  branch: string;
  head_commit: string;
  base_commit: string;
  registered: boolean;
  marker: { operation_id: Uuid; step_id: Uuid; resource_key: string; marker_sha256: Sha256Hex };
  environment_repo_row_sha256: Sha256Hex;
}

export interface RemoteContributionAssociateObservation {
  association_row_sha256: Sha256Hex;
  provider_handle: string;
  provider_response_sha256: Sha256Hex;
  idempotency_key: Sha256Hex;
  ownership_marker: Sha256Hex;
}

export interface SessionPrepareObservation {
  session_row_sha256: Sha256Hex;
  /** Sorted by `resource_key`. */
  resource_markers: { resource_key: string; marker_sha256: Sha256Hex }[];
  runtime_absent: true;
}

export interface LaunchIntentObservation {
  intent_sha256: Sha256Hex;
  dispatched: false;
}

export interface PresentObservationByKind {
  workspace_attachment: WorkspaceAttachmentObservation;
  attachment_claim: AttachmentClaimObservation;
  fresh_branch_prepare: FreshBranchPrepareObservation;
  remote_contribution_associate: RemoteContributionAssociateObservation;
  session_prepare: SessionPrepareObservation;
  launch_intent: LaunchIntentObservation;
}

/** The observation type a `(kind, effect)` pair requires. */
export type ObservationOf<K extends StepKind, E extends EvidenceEffect> = E extends 'present_exact'
  ? PresentObservationByKind[K]
  : RowSetObservation;
