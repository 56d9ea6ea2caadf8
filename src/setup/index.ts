/**
 * Setup and operator writers shared by the REST API and the CLI demo. Each
 * public function owns exactly one transaction and does its I/O (Git checks,
 * file writes) outside it — except `releaseExternalId`, which runs the
 * Store's two release transactions in order (claim, then apply).
 */
export { createWorkspace, lockActiveWorkspaceLocked, type WorkspaceRow } from './workspaces';
export { createRepository, checkLocalRepository, type RepositoryInput, type RepositoryRow } from './repositories';
export { createWorkflow, type WorkflowRow, type WorkflowStepInput, type WorkflowStepRow } from './workflows';
export {
  createAgentProfile,
  createProviderConnection,
  createGroup,
  type AgentProfileRow,
  type LocalExecutor,
  type ProviderConnectionRow,
  type GroupRow,
} from './config-rows';
export { createSharedEnvironment, type EnvironmentRow } from './environments';
export { issueToken, type IssuedToken, type TokenRole } from './tokens';
export { stageAttachment, MAX_ATTACHMENT_BYTES, type StagedAttachment } from './attachments';
export { releaseExternalId, type ReleaseResult } from './release-external-id';
