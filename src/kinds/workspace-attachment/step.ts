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
import {
  applyWorkspaceAttachment,
  applyWorkspaceAttachmentLocked,
  observeWorkspaceAttachment,
  workspaceAttachmentApplyLocks,
} from './ledger';
import { failpoint } from '../../failpoints';
import type { StepHandler } from '../contract';

export const workspaceAttachmentHandler: StepHandler<'workspace_attachment'> = {
  kind: 'workspace_attachment',
  applyInClaim: applyWorkspaceAttachmentLocked,
  applyLocks: workspaceAttachmentApplyLocks,
  async perform(deps, claim) {
    // Effect and record are one transaction here, so the lost-ack window is empty: the failpoint sits just
    // before that transaction, where a crash leaves a claimed step with no effect (observed absent -> retry).
    await failpoint('after_effect_before_record', {
      kind: claim.kind,
      operationId: claim.operationId,
      stepId: claim.stepId,
    });
    return (await applyWorkspaceAttachment(deps.db, claim)).state;
  },
  observe(deps, step) {
    return observeWorkspaceAttachment(deps.db, step);
  },
};
