/**
 * Undo of `workspace_attachment`: the group-member, blocker and environment
 * binding rows the step wrote (re-derived from its request and owner, so
 * their exact hashes are known). One Store transaction deletes them when
 * every one is still exactly the step's row (or already gone); when any was
 * changed by someone else, nothing is deleted and the complete row proof
 * transfers to a cleanup job, which deletes what is still exactly ours.
 * No I/O besides the ledger.
 */
import type { WorkspaceAttachmentRequest } from '../../canonical/types';
import type { OwnedRow } from '../../store/effects/compensate-owned-rows';
import { rowHash } from '../../store/effects/row-documents';
import { expectedAttachmentRows } from './rows';
import type { CompensationClaim } from '../../store/types';
import { ownerOfClaim, settleRows } from '../../compensation/record';
import type { CompensationUndo } from '../contract';

export function workspaceAttachmentOwnedRows(claim: CompensationClaim): OwnedRow[] {
  const exp = expectedAttachmentRows(claim.request as WorkspaceAttachmentRequest, ownerOfClaim(claim));
  return [
    ...exp.members.map((m) => ({
      table: 'workspace_group_members',
      key: `${m.group_id}:${m.task_id}`,
      row_sha256: rowHash(m),
      undone_sha256: null,
    })),
    ...exp.blockers.map((b) => ({
      table: 'task_blockers',
      key: `${b.task_id}:${b.blocker_task_id}`,
      row_sha256: rowHash(b),
      undone_sha256: null,
    })),
    ...(exp.binding === null
      ? []
      : [
          {
            table: 'task_environment_bindings',
            key: exp.binding.task_id,
            row_sha256: rowHash(exp.binding),
            undone_sha256: null,
          },
        ]),
  ];
}

export const undoWorkspaceAttachment: CompensationUndo = (deps, claim) =>
  settleRows(deps, claim, { rows: workspaceAttachmentOwnedRows(claim), detail: {} });
