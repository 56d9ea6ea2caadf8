/**
 * Public surface of `src/plan/`: everything between a raw create request and a
 * CreationPlan, as pure functions (no database, no I/O; context is passed in).
 *
 * Flow: `validateCreateRequest(body)` → load the context it references →
 * `buildCreationPlan(request, context)` → Begin with `plan` and `rows`.
 */
export { normalizeExternalId, EXTERNAL_ID_MAX_BYTES } from './external-id';
export {
  validateCreateRequest,
  validatedRequestDocument,
  contributionKey,
  type CreateTaskRequest,
  type ValidatedCreateRequestDocument,
  type RepositoryRequest,
  type ContributionRequest,
} from './create-request';
export {
  createRequestSchema,
  MAX_ATTACHMENTS,
  MAX_BLOCKERS,
  MAX_CONTRIBUTIONS,
  MAX_REPOSITORIES,
} from './create-request-schema';
export { TITLE_MAX_CHARS, DESCRIPTION_MAX_BYTES, CONTRIBUTION_ID_MAX_CHARS } from './fields';
export { resolveStartPolicy } from './start-policy';
export {
  resolveWorkspacePolicy,
  checkWorkspacePolicyShape,
  type WorkspacePolicyRequest,
  type WorkspacePolicyInput,
  type ParentBinding,
  type EnvironmentInfo,
} from './workspace-policy';
export { sanitizeRepoName, worktreeSegments, freshBranchName, worktreePath, pathSha256 } from './fresh-branch';
export { buildCreationPlan, WORKSPACE_POLICY_DOMAIN, ATTACHMENT_SET_DOMAIN, LAUNCH_CONFIG_DOMAIN } from './build-plan';
export type {
  PlanContext,
  BuiltPlan,
  PlannedRows,
  TaskRowDoc,
  IdentityRowDoc,
  TaskRepositoryRowDoc,
  TaskEnvironmentRowDoc,
  RepositoryInfo,
  StagedAttachmentInfo,
  AgentProfileInfo,
} from './plan-types';
