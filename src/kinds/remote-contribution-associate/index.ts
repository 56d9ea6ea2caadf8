/**
 * `remote_contribution_associate`: a GitHub pull request or GitLab merge
 * request linked with a marker comment (step.ts; the association row,
 * committed before any provider call, in ledger.ts and rows.ts), its undo
 * (compensation.ts) and the cleanup of a transferred association
 * (cleanup.ts).
 */
import type { StepKindModule } from '../contract';
import { cleanAssociation } from './cleanup';
import { undoRemoteContribution } from './compensation';
import { contributionAssociationLocks, verifyContributionAssociationLocked } from './ledger';
import { remoteContributionAssociateHandler } from './step';

export const remoteContributionAssociate: StepKindModule<'remote_contribution_associate'> = {
  ...remoteContributionAssociateHandler,
  verifier: { locks: contributionAssociationLocks, verify: verifyContributionAssociationLocked },
  undo: undoRemoteContribution,
  cleanup: (deps, _job, proof) => cleanAssociation(deps, proof),
};
