/**
 * The default handler for every step kind. The coordinator, recovery and the
 * tests take handlers from here, so a kind without a handler is a type error.
 */
import type { StepKind } from '../domain/vocab';
import { attachmentClaimHandler } from './attachment-claim/step';
import { freshBranchPrepareHandler } from './fresh-branch-prepare/step';
import { launchIntentHandler } from './launch-intent/step';
import { remoteContributionAssociateHandler } from './remote-contribution-associate/step';
import { sessionPrepareHandler } from './session-prepare/step';
import type { StepHandler } from './contract';
import { workspaceAttachmentHandler } from './workspace-attachment/step';

export type StepHandlers = { [K in StepKind]: StepHandler<K> };

export const defaultStepHandlers: StepHandlers = {
  workspace_attachment: workspaceAttachmentHandler,
  attachment_claim: attachmentClaimHandler,
  fresh_branch_prepare: freshBranchPrepareHandler,
  remote_contribution_associate: remoteContributionAssociateHandler,
  session_prepare: sessionPrepareHandler,
  launch_intent: launchIntentHandler,
};
