/**
 * The migration history, in order. Only MigrationInterface classes belong here;
 * DDL helpers live in src/db/migration-columns.ts.
 */
import type { MigrationInterface } from 'typeorm';
import { SetupAndAuthority1796169600000 } from './1796169600000-SetupAndAuthority';
import { CreationLedger1796169660000 } from './1796169660000-CreationLedger';
import { LiveTaskRows1796169720000 } from './1796169720000-LiveTaskRows';
import { CleanupLaunchEvents1796169780000 } from './1796169780000-CleanupLaunchEvents';
import { RepositoryRemoteSlug1796170200000 } from './1796170200000-RepositoryRemoteSlug';
import { DispatchClaimStateIndex1796170260000 } from './1796170260000-DispatchClaimStateIndex';
import { TaskBlockerResolution1796170320000 } from './1796170320000-TaskBlockerResolution';
import { TaskLifecycle1796170380000 } from './1796170380000-TaskLifecycle';
import { StagedAttachmentIndex1796170440000 } from './1796170440000-StagedAttachmentIndex';
import { TaskEnvironmentTaskIndex1796170500000 } from './1796170500000-TaskEnvironmentTaskIndex';
import { BarrierScopeIndex1796170560000 } from './1796170560000-BarrierScopeIndex';
import { OutboxOperationIndex1796170620000 } from './1796170620000-OutboxOperationIndex';
import { StepLeaseIndex1796170680000 } from './1796170680000-StepLeaseIndex';
import { WorkflowWorkspaceIndexes1796170740000 } from './1796170740000-WorkflowWorkspaceIndexes';

export const ALL_MIGRATIONS: (new () => MigrationInterface)[] = [
  SetupAndAuthority1796169600000,
  CreationLedger1796169660000,
  LiveTaskRows1796169720000,
  CleanupLaunchEvents1796169780000,
  RepositoryRemoteSlug1796170200000,
  DispatchClaimStateIndex1796170260000,
  TaskBlockerResolution1796170320000,
  TaskLifecycle1796170380000,
  StagedAttachmentIndex1796170440000,
  TaskEnvironmentTaskIndex1796170500000,
  BarrierScopeIndex1796170560000,
  OutboxOperationIndex1796170620000,
  StepLeaseIndex1796170680000,
  WorkflowWorkspaceIndexes1796170740000,
];
