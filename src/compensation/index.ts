/**
 * The undo of every step kind that has an effect to undo. `launch_intent` is
 * absent by design: an intent is never compensated (V7) — before Complete it
 * has dispatched nothing, normal Abort refuses an armed intent, and only
 * workspace deletion cancels one (`workspace_deleted`, `absent_proven`).
 */
import type { StepKind } from '../domain/vocab';
import { undoAttachmentClaim } from '../kinds/attachment-claim/compensation';
import { undoFreshBranchPrepare } from '../kinds/fresh-branch-prepare/compensation';
import { undoRemoteContribution } from '../kinds/remote-contribution-associate/compensation';
import { undoSessionPrepare } from '../kinds/session-prepare/compensation';
import type { CompensationUndo } from './types';
import { undoWorkspaceAttachment } from '../kinds/workspace-attachment/compensation';

export const COMPENSATION_UNDOS: Readonly<Record<Exclude<StepKind, 'launch_intent'>, CompensationUndo>> = {
  workspace_attachment: undoWorkspaceAttachment,
  attachment_claim: undoAttachmentClaim,
  fresh_branch_prepare: undoFreshBranchPrepare,
  remote_contribution_associate: undoRemoteContribution,
  session_prepare: undoSessionPrepare,
};

export function undoOf(kind: StepKind): CompensationUndo | null {
  return kind === 'launch_intent' ? null : COMPENSATION_UNDOS[kind];
}
