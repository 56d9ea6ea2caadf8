/**
 * Workspace policy resolution: whether a plan has a `workspace_attachment` step
 * (0 or 1, protocol "Canonical bindings") and, if so, its complete request.
 *
 * Contract of `resolveWorkspacePolicy(input)` → `WorkspaceAttachmentRequest | null`:
 * - Mode: the request's `workspace_policy.mode` if given; otherwise
 *   `inherit_parent` when a parent is given; otherwise unbound.
 * - `inherit_parent` selects the step when the parent's binding is resolved
 *   (the parent has a group and/or an environment binding); group and
 *   environment come from the parent. Requires a parent.
 * - `shared_group` selects it for an explicit `group_id` and/or
 *   `environment_id` (at least one is required).
 * - `new_workspace` selects it only for an explicit group/environment binding.
 * - Unbound selects none.
 * - PROJECT DECISION: a non-empty `blocked_by` also selects the step. Blocker
 *   edges (`task_blockers`) are effect rows that need durable step evidence and
 *   compensation, and the spec says "`blocker_ids` are part of the attachment
 *   request". When blockers are the only reason and the request is unbound, the
 *   mode is `new_workspace` with null group/environment; a resolved mode
 *   (explicit or inherited) is kept as is.
 * - `member_ids` = `[task_id]` when a group is selected, else `[]`;
 *   `blocker_ids` = sorted, deduplicated `blocked_by`; `repository_ids` = the
 *   bound environment's repository IDs (from the context), sorted.
 * - Every referenced group/environment must be in the context (the groups and
 *   shared environments that exist in the workspace), else `ValidationError`.
 * Pure: all context is passed in. Errors are `ValidationError(<pointer>, ...)`.
 */
import type { WorkspaceAttachmentRequest } from '../canonical/types';
import { ValidationError } from '../domain/errors';
import type { WorkspacePolicyMode } from '../domain/vocab';

/** The validated `workspace_policy` of a create request (absent IDs are null). */
export interface WorkspacePolicyRequest {
  mode: WorkspacePolicyMode;
  group_id: string | null;
  environment_id: string | null;
}

export interface ParentBinding {
  id: string;
  group_id: string | null;
  environment_id: string | null;
}

export interface EnvironmentInfo {
  id: string;
  repository_ids: string[];
}

export interface WorkspacePolicyInput {
  taskId: string;
  workspaceId: string;
  parentId: string | null;
  policy: WorkspacePolicyRequest | null;
  /** The parent task's binding; must describe `parentId` when that is set. */
  parent: ParentBinding | null;
  blockedBy: readonly string[];
  /** Shared environments referenced by the request or the parent, by ID. */
  environments: Readonly<Record<string, EnvironmentInfo>>;
  /** IDs of the groups that exist in the workspace. */
  groups: readonly string[];
}

function sortedUnique(ids: readonly string[]): string[] {
  return [...new Set(ids)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Static checks of a policy against the request alone (no context). Used by
 * request validation, so a contradictory policy is a 400 before any lookup.
 */
export function checkWorkspacePolicyShape(policy: WorkspacePolicyRequest | null, parentId: string | null): void {
  if (policy === null) return;
  switch (policy.mode) {
    case 'inherit_parent':
      if (parentId === null) {
        throw new ValidationError(
          '/workspace_policy/mode',
          'inherit_parent requires parent_id (there is no parent to inherit from)',
        );
      }
      if (policy.group_id !== null) {
        throw new ValidationError(
          '/workspace_policy/group_id',
          'inherit_parent takes the group from the parent; group_id must be absent',
        );
      }
      if (policy.environment_id !== null) {
        throw new ValidationError(
          '/workspace_policy/environment_id',
          'inherit_parent takes the environment from the parent; environment_id must be absent',
        );
      }
      return;
    case 'shared_group':
      if (policy.group_id === null && policy.environment_id === null) {
        throw new ValidationError('/workspace_policy', 'shared_group requires group_id and/or environment_id');
      }
      return;
    case 'new_workspace':
      return;
  }
}

/** Resolves the attachment step request, or `null` when policy selects no step. */
export function resolveWorkspacePolicy(input: WorkspacePolicyInput): WorkspaceAttachmentRequest | null {
  const { policy, parentId, parent } = input;
  checkWorkspacePolicyShape(policy, parentId);
  if (parentId !== null && (parent === null || parent.id !== parentId)) {
    throw new ValidationError('/parent_id', `unknown parent task ${parentId}`);
  }
  if (parentId === null && parent !== null) {
    throw new Error(`plan context names parent ${parent.id} but the request has no parent_id`);
  }

  let mode: WorkspacePolicyMode | null = policy?.mode ?? (parentId !== null ? 'inherit_parent' : null);
  let groupId: string | null = null;
  let environmentId: string | null = null;
  let groupField = '/workspace_policy/group_id';
  let environmentField = '/workspace_policy/environment_id';
  if (mode === 'inherit_parent') {
    // parent is non-null here: inherit_parent implies parentId (shape check).
    groupId = parent?.group_id ?? null;
    environmentId = parent?.environment_id ?? null;
    groupField = environmentField = '/parent_id';
  } else if (policy !== null) {
    groupId = policy.group_id;
    environmentId = policy.environment_id;
  }

  const blockerIds = sortedUnique(input.blockedBy);
  if (groupId === null && environmentId === null && blockerIds.length === 0) return null;
  // Selected only by blockers and otherwise unbound: see the PROJECT DECISION above.
  mode ??= 'new_workspace';

  if (groupId !== null && !input.groups.includes(groupId)) {
    throw new ValidationError(groupField, `unknown group ${groupId} in workspace ${input.workspaceId}`);
  }
  let repositoryIds: string[] = [];
  if (environmentId !== null) {
    const env = Object.prototype.hasOwnProperty.call(input.environments, environmentId)
      ? input.environments[environmentId]
      : undefined;
    if (env === undefined || env.id !== environmentId) {
      throw new ValidationError(
        environmentField,
        `unknown shared environment ${environmentId} in workspace ${input.workspaceId}`,
      );
    }
    repositoryIds = sortedUnique(env.repository_ids);
  }

  return {
    task_id: input.taskId,
    workspace_id: input.workspaceId,
    parent_id: parentId,
    mode,
    group_id: groupId,
    member_ids: groupId !== null ? [input.taskId] : [],
    blocker_ids: blockerIds,
    environment_id: environmentId,
    repository_ids: repositoryIds,
  };
}
