/**
 * Closed `observation` schemas of StepEvidence and CompensationProof.
 *
 * Contract:
 * - effect `present_exact`: the per-kind object in `PRESENT_OBSERVATION_SCHEMAS`,
 *   which repeats every row hash, owner and generation the Complete predicate
 *   re-checks against the locked effect rows.
 * - effects `absent_proven`, `conflict`, `transferred` (and every
 *   CompensationProof): the one shared `rowSetObservationSchema`
 *   `{reason, rows:[{table, key, row_sha256: null|hash}]}`, rows sorted by
 *   (table, key); `row_sha256: null` means the row was proven absent.
 * Row lists are sorted and unique by their primary key (`sorted-lists.ts`).
 */
import type { SchemaObject } from 'ajv';
import { WORKSPACE_POLICY_MODES, type StepKind } from '../../domain/vocab';
import {
  branchName,
  closedObject,
  commitId,
  constant,
  enumOf,
  listOf,
  nullableObject,
  nullableSha256,
  sha256,
  snakeName,
  text,
  uint,
  uuid,
} from './fragments';

/** `workspace_group_members.role`. */
export const GROUP_MEMBER_ROLES = ['member', 'lead'] as const;
export type GroupMemberRole = (typeof GROUP_MEMBER_ROLES)[number];

/** A referenced row: table, canonical primary key, and its `rowHash()` (null: proven absent). */
export const observedRowSchema = closedObject({
  table: snakeName(64),
  key: text(255),
  row_sha256: nullableSha256,
});

export const rowSetObservationSchema = closedObject({
  reason: text(200),
  rows: listOf(observedRowSchema),
});

export const workspaceAttachmentObservationSchema = closedObject({
  policy_mode: enumOf(WORKSPACE_POLICY_MODES),
  group_member_rows: listOf(
    closedObject({ group_id: uuid, task_id: uuid, role: enumOf(GROUP_MEMBER_ROLES), row_sha256: sha256 }),
  ),
  blocker_rows: listOf(closedObject({ task_id: uuid, blocker_task_id: uuid, row_sha256: sha256 })),
  environment_binding: nullableObject({ environment_id: uuid, task_id: uuid, row_sha256: sha256 }),
  environment_repo_rows: listOf(closedObject({ id: uuid, repository_id: uuid, row_sha256: sha256 })),
  owner_operation_id: uuid,
  step_generation: uint,
});

export const attachmentClaimObservationSchema = closedObject({
  operation_id: uuid,
  attachments: listOf(
    closedObject({
      attachment_id: uuid,
      prior_owner_kind: constant('staging'),
      staging_owner_id: text(200),
      current_owner_kind: constant('task'),
      task_id: uuid,
      content_sha256: sha256,
      size: uint,
      row_sha256: sha256,
    }),
    1,
  ),
});

export const freshBranchPrepareObservationSchema = closedObject({
  worktree_path: text(1024),
  canonical_path_sha256: sha256,
  branch: branchName,
  head_commit: commitId,
  base_commit: commitId,
  registered: { type: 'boolean' },
  marker: closedObject({ operation_id: uuid, step_id: uuid, resource_key: text(255), marker_sha256: sha256 }),
  environment_repo_row_sha256: sha256,
});

export const remoteContributionAssociateObservationSchema = closedObject({
  association_row_sha256: sha256,
  provider_handle: text(1024),
  provider_response_sha256: sha256,
  idempotency_key: sha256,
  ownership_marker: sha256,
});

export const sessionPrepareObservationSchema = closedObject({
  session_row_sha256: sha256,
  resource_markers: listOf(closedObject({ resource_key: text(255), marker_sha256: sha256 })),
  runtime_absent: constant(true),
});

export const launchIntentObservationSchema = closedObject({
  intent_sha256: sha256,
  dispatched: constant(false),
});

export const PRESENT_OBSERVATION_SCHEMAS: Readonly<Record<StepKind, SchemaObject>> = {
  workspace_attachment: workspaceAttachmentObservationSchema,
  attachment_claim: attachmentClaimObservationSchema,
  fresh_branch_prepare: freshBranchPrepareObservationSchema,
  remote_contribution_associate: remoteContributionAssociateObservationSchema,
  session_prepare: sessionPrepareObservationSchema,
  launch_intent: launchIntentObservationSchema,
};
