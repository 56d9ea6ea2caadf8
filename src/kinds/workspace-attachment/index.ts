/**
 * `workspace_attachment`: group membership, blocker edges and the shared
 * environment binding of a new task (step.ts; its one transaction in
 * ledger.ts over the rows in rows.ts), undone by compensation.ts. Rows only:
 * a transferred effect is cleaned by undoing the proof's rows.
 */
import { rowsDecision } from '../../cleanup/decision';
import type { StepKindModule } from '../contract';
import { undoWorkspaceAttachment } from './compensation';
import { verifyWorkspaceAttachmentLocked, workspaceAttachmentLocks } from './ledger';
import { workspaceAttachmentHandler } from './step';

export const workspaceAttachment: StepKindModule<'workspace_attachment'> = {
  ...workspaceAttachmentHandler,
  verifier: { locks: workspaceAttachmentLocks, verify: verifyWorkspaceAttachmentLocked },
  undo: undoWorkspaceAttachment,
  cleanup: () => Promise.resolve(rowsDecision('operation-owned rows')),
};
