/**
 * Every step kind, one line each: the step worker, the reaper, Complete's
 * verifier, compensation, the cleanup worker and `taskledger verify` take a
 * kind's behaviour from here (src/kinds/contract.ts), so a kind missing a
 * part is a type error. Adding a kind: its folder under src/kinds/, its name
 * in STEP_KINDS (domain/vocab.ts), its schemas in src/canonical/schemas/,
 * and one line below.
 */
import type { StepKind } from '../domain/vocab';
import { attachmentClaim } from './attachment-claim';
import type { StepHandler, StepKindModule } from './contract';
import { freshBranchPrepare } from './fresh-branch-prepare';
import { launchIntent } from './launch-intent';
import { remoteContributionAssociate } from './remote-contribution-associate';
import { sessionPrepare } from './session-prepare';
import { workspaceAttachment } from './workspace-attachment';

export type StepKindModules = { readonly [K in StepKind]: StepKindModule<K> };

export const STEP_KIND_MODULES: StepKindModules = {
  workspace_attachment: workspaceAttachment,
  attachment_claim: attachmentClaim,
  fresh_branch_prepare: freshBranchPrepare,
  remote_contribution_associate: remoteContributionAssociate,
  session_prepare: sessionPrepare,
  launch_intent: launchIntent,
};

export function kindModule<K extends StepKind>(kind: K): StepKindModule<K> {
  return STEP_KIND_MODULES[kind];
}

/** What the step worker and recovery drive; tests may substitute a kind's handler. */
export type StepHandlers = { [K in StepKind]: StepHandler<K> };

export const defaultStepHandlers: StepHandlers = STEP_KIND_MODULES;
