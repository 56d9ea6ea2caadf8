/**
 * Closed per-kind step request schemas: each is the complete `request` object
 * of one plan step (protocol "Closed step schemas and proof"), not a property
 * bag. List fields are sorted and unique by their canonical key; that is
 * asserted after schema validation (`sorted-lists.ts`).
 */
import type { SchemaObject } from 'ajv';
import { CONTRIBUTION_KINDS, PROVIDERS, WORKSPACE_POLICY_MODES, type StepKind } from '../../domain/vocab';
import {
  branchName,
  closedObject,
  commitId,
  conditionalObject,
  enumOf,
  listOf,
  nullableUuid,
  sha256,
  text,
  uint,
  uuid,
} from './fragments';

/** The one contribution kind each provider has. */
export const PROVIDER_CONTRIBUTION_KIND = { github: 'pull_request', gitlab: 'merge_request' } as const;

/** Executor IDs and profile IDs are `varchar(100)` in `task_sessions`. */
const executorRef = text(100);
/** Resource keys are the `varchar(255)` primary key of `task_resource_markers`. */
const resourceKey = text(255);

export const workspaceAttachmentRequestSchema = closedObject({
  task_id: uuid,
  workspace_id: uuid,
  parent_id: nullableUuid,
  mode: enumOf(WORKSPACE_POLICY_MODES),
  group_id: nullableUuid,
  member_ids: listOf(uuid),
  blocker_ids: listOf(uuid),
  environment_id: nullableUuid,
  repository_ids: listOf(uuid),
});

export const attachmentClaimItemSchema = closedObject({
  attachment_id: uuid,
  staging_owner_id: text(200),
  content_sha256: sha256,
  size: uint,
});

export const attachmentClaimRequestSchema = closedObject({
  task_id: uuid,
  workspace_id: uuid,
  // One attachment_claim step per nonempty attachment set.
  attachments: listOf(attachmentClaimItemSchema, 1),
});

export const freshBranchPrepareRequestSchema = closedObject({
  task_id: uuid,
  workspace_id: uuid,
  repository_id: uuid,
  task_environment_id: uuid,
  task_environment_repo_id: uuid,
  resource_key: resourceKey,
  canonical_path_sha256: sha256,
  branch: branchName,
  base_commit: commitId,
});

export const remoteContributionAssociateRequestSchema = conditionalObject(
  {
    provider: enumOf(PROVIDERS),
    workspace_id: uuid,
    repository_id: uuid,
    contribution_kind: enumOf(CONTRIBUTION_KINDS),
    contribution_id: text(200),
    connection_id: uuid,
    task_id: uuid,
  },
  Object.entries(PROVIDER_CONTRIBUTION_KIND).map(([provider, kind]) => ({
    if: { properties: { provider: { const: provider } } },
    then: { properties: { contribution_kind: { const: kind } } },
  })),
);

export const sessionPrepareRequestSchema = closedObject({
  task_id: uuid,
  workspace_id: uuid,
  session_id: uuid,
  task_environment_id: uuid,
  executor_id: executorRef,
  executor_profile_id: executorRef,
  agent_profile_id: uuid,
  launch_config_sha256: sha256,
  resource_keys: listOf(resourceKey),
});

export const launchIntentRequestSchema = closedObject({
  task_id: uuid,
  workspace_id: uuid,
  session_id: uuid,
  agent_profile_id: uuid,
  executor_id: executorRef,
  executor_profile_id: executorRef,
  launch_config_sha256: sha256,
});

export const STEP_REQUEST_SCHEMAS: Readonly<Record<StepKind, SchemaObject>> = {
  workspace_attachment: workspaceAttachmentRequestSchema,
  attachment_claim: attachmentClaimRequestSchema,
  fresh_branch_prepare: freshBranchPrepareRequestSchema,
  remote_contribution_associate: remoteContributionAssociateRequestSchema,
  session_prepare: sessionPrepareRequestSchema,
  launch_intent: launchIntentRequestSchema,
};
