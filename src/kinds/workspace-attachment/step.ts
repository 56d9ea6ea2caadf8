/**
 * `workspace_attachment`: group membership, blocker edges and the shared
 * environment binding of a new task. Database only: `perform` runs
 * `applyWorkspaceAttachment`, whose one transaction writes the rows and the
 * step's outcome together (so the rows exist exactly when the step is
 * `succeeded`; there is no window for `unknown`). A stale claim propagates as
 * `ConflictError('stale_claim')` with nothing written.
 *
 * observe (read-only): exact rows and references -> present; every row this
 * step would own absent -> absent; partial, foreign or changed -> conflict.
 */
import { ledgerOnlyHandler } from '../ledger-only';
import {
  applyWorkspaceAttachment,
  applyWorkspaceAttachmentLocked,
  observeWorkspaceAttachment,
  workspaceAttachmentApplyLocks,
  workspaceAttachmentApplyReads,
} from './ledger';

export const workspaceAttachmentHandler = ledgerOnlyHandler({
  kind: 'workspace_attachment',
  apply: applyWorkspaceAttachment,
  applyInClaim: applyWorkspaceAttachmentLocked,
  applyLocks: workspaceAttachmentApplyLocks,
  applyReads: workspaceAttachmentApplyReads,
  observe: observeWorkspaceAttachment,
});
