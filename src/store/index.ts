/**
 * The ledger Store: every public method owns exactly one transaction (Complete
 * owns two, its phases). Names follow the protocol's Store API.
 */
export { beginTaskCreation, type BeginDeps } from './begin';
export { claimTaskCreationStep, renewTaskCreationStepLease, DEFAULT_LEASE_MS } from './step-claims';
export {
  completeTaskCreationStep,
  failTaskCreationStep,
  armLaunchIntent,
  resolveTaskCreationStep,
  type CompleteStepInput,
  type ResolveProof,
} from './step-results';
export { claimTaskCreationCompensation, completeTaskCreationCompensation, type CleanupTransfer } from './compensation';
export { completeTaskCreation, completeTaskCreationPhaseA, completeTaskCreationPhaseB } from './complete';
export { abortTaskCreation, type AbortResult } from './abort';
export { authenticateToken, tokenSha256, actorDocumentFor } from './actor';
export { findByExternalId, getTaskView } from './task-view';
export { applyWorkspaceAttachment } from '../kinds/workspace-attachment/ledger';
export { applyAttachmentClaim, type AttachmentFileProblem } from '../kinds/attachment-claim/ledger';
export { applySessionPrepare } from '../kinds/session-prepare/ledger';
export { armExactLaunchIntent } from '../kinds/launch-intent/ledger';
export { persistWorktreeMarker, recordFreshBranch, type FreshBranchProof } from '../kinds/fresh-branch-prepare/ledger';
export { verifyEffectRowsLocked, type EffectVerifier } from './effects/verify';
export type { EffectObservation, EffectOutcome } from './effects/recording';
export type * from './types';
