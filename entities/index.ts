/**
 * Every entity class, one file per table of docs/schema.md. Entities never
 * create schema (synchronize is off); migrations/ is the only source of DDL.
 */
import { AgentProfile } from './agent-profile';
import { ApiToken } from './api-token';
import { ArchiveMembershipBarrier } from './archive-membership-barrier';
import { EventOutbox } from './event-outbox';
import { ExternalIdRelease } from './external-id-release';
import { ExecutorRunning } from './executor-running';
import { GitRepository } from './git-repository';
import { LockKey } from './lock-key';
import { ProviderConnection } from './provider-connection';
import { Task } from './task';
import { TaskBlocker } from './task-blocker';
import { TaskCreationOperation } from './task-creation-operation';
import { TaskCreationStep } from './task-creation-step';
import { TaskEnvironment } from './task-environment';
import { TaskEnvironmentBinding } from './task-environment-binding';
import { TaskEnvironmentRepo } from './task-environment-repo';
import { TaskIdentity } from './task-identity';
import { TaskLaunchDispatchClaim } from './task-launch-dispatch-claim';
import { TaskMessageAttachment } from './task-message-attachment';
import { TaskRemoteContributionAssociation } from './task-remote-contribution-association';
import { TaskRepository } from './task-repository';
import { TaskResourceCleanupJob } from './task-resource-cleanup-job';
import { TaskResourceMarker } from './task-resource-marker';
import { TaskRevision } from './task-revision';
import { TaskSession } from './task-session';
import { Workflow } from './workflow';
import { WorkflowStep } from './workflow-step';
import { Workspace } from './workspace';
import { WorkspaceGroup } from './workspace-group';
import { WorkspaceGroupMember } from './workspace-group-member';
import { WorkspaceDeletion } from './workspace-deletion';

export { AgentProfile } from './agent-profile';
export { ApiToken } from './api-token';
export { ArchiveMembershipBarrier } from './archive-membership-barrier';
export { EventOutbox } from './event-outbox';
export { ExternalIdRelease } from './external-id-release';
export { ExecutorRunning } from './executor-running';
export { GitRepository } from './git-repository';
export { LockKey } from './lock-key';
export { ProviderConnection } from './provider-connection';
export { Task } from './task';
export { TaskBlocker } from './task-blocker';
export { TaskCreationOperation } from './task-creation-operation';
export { TaskCreationStep } from './task-creation-step';
export { TaskEnvironment } from './task-environment';
export { TaskEnvironmentBinding } from './task-environment-binding';
export { TaskEnvironmentRepo } from './task-environment-repo';
export { TaskIdentity } from './task-identity';
export { TaskLaunchDispatchClaim } from './task-launch-dispatch-claim';
export { TaskMessageAttachment } from './task-message-attachment';
export { TaskRemoteContributionAssociation } from './task-remote-contribution-association';
export { TaskRepository } from './task-repository';
export { TaskResourceCleanupJob } from './task-resource-cleanup-job';
export { TaskResourceMarker } from './task-resource-marker';
export { TaskRevision } from './task-revision';
export { TaskSession } from './task-session';
export { Workflow } from './workflow';
export { WorkflowStep } from './workflow-step';
export { Workspace } from './workspace';
export { WorkspaceGroup } from './workspace-group';
export { WorkspaceGroupMember } from './workspace-group-member';
export { WorkspaceDeletion } from './workspace-deletion';

export const ALL_ENTITIES: Function[] = [
  AgentProfile,
  ApiToken,
  ArchiveMembershipBarrier,
  EventOutbox,
  ExecutorRunning,
  ExternalIdRelease,
  GitRepository,
  LockKey,
  ProviderConnection,
  Task,
  TaskBlocker,
  TaskCreationOperation,
  TaskCreationStep,
  TaskEnvironment,
  TaskEnvironmentBinding,
  TaskEnvironmentRepo,
  TaskIdentity,
  TaskLaunchDispatchClaim,
  TaskMessageAttachment,
  TaskRemoteContributionAssociation,
  TaskRepository,
  TaskResourceCleanupJob,
  TaskResourceMarker,
  TaskRevision,
  TaskSession,
  Workflow,
  WorkflowStep,
  Workspace,
  WorkspaceGroup,
  WorkspaceGroupMember,
  WorkspaceDeletion,
];
