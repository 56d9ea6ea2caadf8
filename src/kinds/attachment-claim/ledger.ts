/**
 * ApplyAttachmentClaim: the database half of `attachment_claim` and its
 * outcome, in one transaction; plus the rows' read-only observation and
 * Complete's verifier. The file copies (and, after a problem, their removal)
 * happen before, outside any transaction (src/kinds/attachment-claim/step.ts);
 * what they left on disk is passed in (`ClaimFiles`).
 *
 * Locks, in order: workspace 1, operation 4.2, task 5.2, identity 6, steps 7
 * (`lockClaimedLocked`); every requested `task_message_attachments` row and
 * the step's ownership marker (14, FOR UPDATE, ascending `table:key`).
 * The verdict, from the rows under those locks:
 * - copies verified, every row exactly staged (or already ours): the rows
 *   flip to `owner_kind = 'task'`, `task_id`, `claimed_by_operation_id`,
 *   `claimed_by_step_id`, the marker is deleted (the claimed rows own the
 *   copies from now on) and the step `running -> succeeded`, with
 *   `ownership_marker` = the marker hash;
 * - copies verified but the rows cannot be claimed: zero writes, and the
 *   problem is returned (`unclaimable`): the step removes its copies first,
 *   then records it;
 * - copies removed after a problem: the marker is deleted and the step
 *   records the failure with the rows, the marker and the copies proven
 *   absent: every row still exactly staged -> `failed` (permanent) or
 *   `retry_wait` (transient); rows staged, changed or gone (an expired
 *   upload) -> `failed` (`content_changed`, `attachment_missing`); foreign
 *   or mixed -> `unknown` (`conflict`);
 * - copies stuck (their removal failed): `unknown` (`conflict`), the marker
 *   kept for recovery;
 * - the marker missing or foreign: `unknown` (`conflict`).
 * Staged files are left in place: a claimed row keeps its staged storage
 * path. No event.
 */
import { sameJson } from '../../canonical/canonical-json';
import { runTransaction, type Db, type Tx } from '../../db/tx';
import { lockClaimedLocked } from '../../store/claimed';
import type { StepClaim, StepRow } from '../../store/types';
import {
  effectMismatch,
  failWithRowsLocked,
  ownerOf,
  presentEvidenceOf,
  recordSuccessLocked,
  requestOf,
  rowSetEvidenceOf,
  stepRequestOf,
  type EffectObservation,
  type EffectOutcome,
} from '../../store/effects/recording';
import {
  attachmentMarkerLock,
  deleteAttachmentMarkerLocked,
  expectedAttachmentMarker,
  readAttachmentMarker,
} from './marker';
import { copiesGone, lockNeeds, observationOf, observedRows, readFound, type RowState } from './rows';
import { dbReader, takeLocks, txReader, type LockNeed } from '../../store/effects/row-locks';

export { claimedDoc, stagedDoc } from './rows';

/** What the copy phase found, when it could not verify every copy. */
export interface AttachmentFileProblem {
  /**
   * `permanent`: the staged content is gone or changed; `transient`: an I/O
   * error worth retrying; `ambiguous`: copies may remain (their removal failed).
   */
  class: 'permanent' | 'transient' | 'ambiguous';
  code: string;
  message: string;
}

/** What the file phase left at the task's claimed paths. */
export type ClaimFiles =
  | { copies: 'verified' }
  | { copies: 'removed'; problem: AttachmentFileProblem }
  | { copies: 'stuck'; problem: AttachmentFileProblem };

export type ClaimResult = EffectOutcome | { unclaimable: AttachmentFileProblem };

/** What the rows (and the file problem, if any) allow: the claim, or the failure to record. */
function verdictOf(states: Set<RowState>, problem: AttachmentFileProblem | null): 'claim' | AttachmentFileProblem {
  const only = (...allowed: RowState[]) => [...states].every((s) => allowed.includes(s));
  if (problem?.class === 'ambiguous') return problem;
  if (problem === null && only('staged', 'ours')) return 'claim';
  if (problem !== null && only('staged')) return problem;
  if (only('staged', 'staged_changed', 'missing')) {
    return states.has('missing')
      ? { class: 'permanent', code: 'attachment_missing', message: 'a planned attachment row is gone (expired)' }
      : { class: 'permanent', code: 'content_changed', message: 'a staged attachment changed since planning' };
  }
  return problem === null
    ? { class: 'ambiguous', code: 'foreign_row', message: 'attachment rows are missing, foreign or mixed' }
    : { class: 'ambiguous', code: problem.code, message: 'copy failed and the rows are no longer exactly staged' };
}

export async function applyAttachmentClaim(db: Db, claim: StepClaim, files: ClaimFiles): Promise<ClaimResult> {
  const req = requestOf(claim, 'attachment_claim');
  const owner = ownerOf(claim);
  return runTransaction(db, 'ApplyAttachmentClaim', async (tx): Promise<ClaimResult> => {
    const ctx = await lockClaimedLocked(tx, claim);
    await takeLocks(tx, [...lockNeeds(req, 'update'), attachmentMarkerLock(req, 'update')]);
    const read = txReader(tx);
    const found = await readFound(read, req, owner);
    const marker = await readAttachmentMarker(read, req, claim);
    const rows = observedRows(found);
    const verdict = verdictOf(new Set(found.map((f) => f.state)), files.copies === 'verified' ? null : files.problem);
    if (verdict !== 'claim' && files.copies === 'verified') return { unclaimable: verdict };
    if (files.copies === 'stuck') {
      return failWithRowsLocked(
        tx,
        ctx,
        claim,
        'ambiguous',
        verdict === 'claim' ? 'copy_removal_failed' : verdict.code,
        files.problem.message,
        [...rows, marker.row],
      );
    }
    if (marker.presence !== 'ours') {
      return failWithRowsLocked(
        tx,
        ctx,
        claim,
        'ambiguous',
        'marker_missing',
        "the step's ownership marker row is not in place",
        [...rows, marker.row],
      );
    }
    await deleteAttachmentMarkerLocked(tx, req);
    if (verdict !== 'claim') {
      const proven = [...rows, { ...marker.row, row_sha256: null }, ...copiesGone(req)];
      return failWithRowsLocked(tx, ctx, claim, verdict.class, verdict.code, verdict.message, proven);
    }
    for (const f of found.filter((x) => x.state === 'staged')) {
      await tx.exec(
        `UPDATE task_message_attachments
            SET owner_kind = 'task', task_id = ?, claimed_by_operation_id = ?, claimed_by_step_id = ?, updated_at = ${tx.now}
          WHERE id = ? AND owner_kind = 'staging' AND task_id IS NULL`,
        [req.task_id, owner.operation_id, owner.step_id, f.item.attachment_id],
      );
    }
    const after = await readFound(read, req, owner);
    if (after.some((f) => f.state !== 'ours')) throw new Error('claimed attachment rows did not read back exactly');
    return recordSuccessLocked(tx, ctx, claim, presentEvidenceOf(claim, observationOf(req, owner, after)), {
      ownershipMarker: expectedAttachmentMarker(req, claim).marker_sha256,
    });
  });
}

/**
 * Read-only: every row claimed exactly by this step -> present (the caller
 * also checks the claimed files); no row claimed by it (each exactly staged,
 * changed or gone), no marker and no copy on disk (`copiesOnDisk`, the
 * caller's look) -> absent; anything else, including this step's marker
 * still in place (copies it made may remain), -> conflict.
 */
export async function observeAttachmentClaimRows(
  db: Db,
  step: StepRow,
  copiesOnDisk: boolean,
): Promise<EffectObservation> {
  const req = stepRequestOf(step, 'attachment_claim');
  const owner = ownerOf(step);
  const found = await readFound(dbReader(db), req, owner);
  if (found.every((f) => f.state === 'ours')) {
    return { effect: 'present_exact', evidence: presentEvidenceOf(step, observationOf(req, owner, found)) };
  }
  const marker = await readAttachmentMarker(dbReader(db), req, step);
  const rows = [...observedRows(found), marker.row];
  const unclaimed = found.every((f) => f.state === 'staged' || f.state === 'staged_changed' || f.state === 'missing');
  if (unclaimed && marker.presence === 'absent' && !copiesOnDisk) {
    return {
      effect: 'absent_proven',
      evidence: rowSetEvidenceOf(
        step,
        'absent_proven',
        'no attachment is claimed by this step, and neither its marker nor a copy exists',
        [...rows, ...copiesGone(req)],
      ),
    };
  }
  const reason =
    marker.presence === 'ours'
      ? "this step's marker is in place: copies it made may remain"
      : copiesOnDisk && unclaimed
        ? "files at the claimed paths without this step's marker"
        : 'attachment rows are missing, foreign, changed or mixed';
  return { effect: 'conflict', evidence: rowSetEvidenceOf(step, 'conflict', reason, rows) };
}

export function attachmentClaimLocks(step: StepRow): LockNeed[] {
  return lockNeeds(stepRequestOf(step, 'attachment_claim'), 'share');
}

export async function verifyAttachmentClaimLocked(
  tx: Tx,
  step: StepRow,
  evidence: { observation: Record<string, unknown> },
): Promise<void> {
  const req = stepRequestOf(step, 'attachment_claim');
  const owner = ownerOf(step);
  await takeLocks(tx, attachmentClaimLocks(step));
  const found = await readFound(txReader(tx), req, owner);
  const bad = found.find((f) => f.state !== 'ours');
  if (bad) throw effectMismatch(step, `attachment ${bad.item.attachment_id} is ${bad.state}, not claimed by this step`);
  if (!sameJson(observationOf(req, owner, found), evidence.observation)) {
    throw effectMismatch(step, 'evidence does not repeat the claimed rows byte-exactly');
  }
}
