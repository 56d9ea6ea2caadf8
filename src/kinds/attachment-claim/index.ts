/**
 * `attachment_claim`: staged uploads become the task's attachments. The file
 * copies (files.ts) under the step's ownership marker (marker.ts), the
 * claim's transaction over the attachment rows (ledger.ts, rows.ts), the
 * recovery of an unrecorded copy (recovery.ts), the undo (compensation.ts),
 * the cleanup of a transferred claim (cleanup.ts) and `verify`'s look at the
 * attachment files (verify.ts).
 */
import type { StepKindModule } from '../contract';
import { cleanAttachments } from './cleanup';
import { undoAttachmentClaim } from './compensation';
import { attachmentClaimLocks, verifyAttachmentClaimLocked } from './ledger';
import { attachmentClaimHandler } from './step';
import { checkAttachmentFiles } from './verify';

export const attachmentClaim: StepKindModule<'attachment_claim'> = {
  ...attachmentClaimHandler,
  verifier: { locks: attachmentClaimLocks, verify: verifyAttachmentClaimLocked },
  undo: undoAttachmentClaim,
  cleanup: (deps, _job, proof) => cleanAttachments(deps, proof),
  verifyPass: checkAttachmentFiles,
};
