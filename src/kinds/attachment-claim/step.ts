/**
 * `attachment_claim`: staged uploads become the task's attachments.
 *
 * perform:
 * 1. a heartbeat (a stale claim stops before anything is marked or copied),
 *    then `persistAttachmentMarker` (one transaction): the step's ownership
 *    marker for `<dataDir>/attachments/<task>/` is committed before any copy;
 * 2. outside any transaction, for each attachment (ascending id, heartbeat
 *    after each): copy `stagedAttachmentPath(dataDir, workspace, id)` to a
 *    temp file beside `claimedAttachmentPath(dataDir, task, id)`, fsync,
 *    re-hash the temp file and require the request's SHA-256 and size, then
 *    rename it into place. A claimed file that already has the right content
 *    (an earlier attempt of this step) is kept. A missing or changed staged
 *    file stops the copies as a permanent problem; any other I/O error as a
 *    transient one;
 * 3. `applyAttachmentClaim` (one transaction) flips the rows, deletes the
 *    marker and records success — or finds the rows unclaimable (changed,
 *    gone, foreign) and writes nothing;
 * 4. after any problem: a heartbeat (the fence: no later attempt of this
 *    step can be copying while our lease is live), the step removes every
 *    copy and temp file it may have made (the marker proves them its own),
 *    then `applyAttachmentClaim` deletes the marker and records the failure
 *    with the copies proven absent. A removal that fails records `unknown`
 *    and keeps the marker.
 * So a step that is not `succeeded` leaves no copy behind, except while it
 * is `running` or `unknown` — and then its marker says so.
 *
 * observe: rows claimed exactly by this step and every claimed file present
 * with the right hash and size -> present; no row claimed by it, no marker,
 * no copy -> absent; anything else -> conflict.
 *
 * removeUnrecorded (recovery of an `unknown` step, before it observes): a
 * worker that died after copying and before recording left its marker and
 * copies; with no row claimed by the step, the copies are removed and the
 * marker released (src/kinds/attachment-claim/recovery.ts), so the observation
 * proves the effect absent and the step retries from scratch — or, if the
 * creation is aborted instead, nothing of it stays on disk.
 */
import { failpoint } from '../../failpoints';
import type { AttachmentClaimRequest } from '../../canonical/types';
import {
  applyAttachmentClaim,
  observeAttachmentClaimRows,
  type AttachmentFileProblem,
  type ClaimFiles,
} from './ledger';
import { persistAttachmentMarker } from './marker';
import { requestOf, rowSetEvidenceOf, stepRequestOf, type ObservedRow } from '../../store/effects/recording';
import { rowHash } from '../../store/effects/row-documents';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../storage/paths';
import type { StepClaim, StepRow } from '../../store/types';
import { removeUnrecordedCopies } from './recovery';
import { anyCopyOf, copyVerified, digestFile, matchesItem, removeCopiesOf } from './files';
import type { EffectDeps, Observation, StepHandler } from '../contract';

export { digestFile, type FileDigest } from './files';

async function copyAll(
  deps: EffectDeps,
  req: AttachmentClaimRequest,
  heartbeat: () => Promise<void>,
): Promise<AttachmentFileProblem | null> {
  for (const item of req.attachments) {
    const dst = claimedAttachmentPath(deps.dataDir, req.task_id, item.attachment_id);
    const src = stagedAttachmentPath(deps.dataDir, req.workspace_id, item.attachment_id);
    let problem: AttachmentFileProblem | null = null;
    try {
      if (!matchesItem(await digestFile(dst), item)) problem = await copyVerified(src, dst, item);
    } catch (err) {
      problem = { class: 'transient', code: 'file_io_error', message: (err as Error).message.slice(0, 2000) };
    }
    if (problem !== null) return problem;
    await heartbeat();
  }
  return null;
}

/** Step 4: remove the copies under a fresh lease, then record the problem with them proven gone. */
async function recordWithoutCopies(
  deps: EffectDeps,
  claim: StepClaim,
  req: AttachmentClaimRequest,
  heartbeat: () => Promise<void>,
  problem: AttachmentFileProblem,
) {
  // A stale claim throws here and removes nothing: the copies then belong to whoever holds the step now.
  await heartbeat();
  let files: ClaimFiles;
  try {
    await removeCopiesOf(deps.dataDir, req);
    files = { copies: 'removed', problem };
  } catch (err) {
    const message = `${problem.code}; removing the copies failed: ${(err as Error).message}`.slice(0, 2000);
    files = { copies: 'stuck', problem: { class: 'ambiguous', code: 'copy_removal_failed', message } };
  }
  const result = await applyAttachmentClaim(deps.db, claim, files);
  if (!('state' in result)) throw new Error('internal: an outcome without copies must be recorded');
  return result.state;
}

async function perform(deps: EffectDeps, claim: StepClaim, heartbeat: () => Promise<void>) {
  const req = requestOf(claim, 'attachment_claim');
  // A stale delivery stops here (the lease renewal is a claim CAS) before it marks or touches anything.
  await heartbeat();
  const marked = await persistAttachmentMarker(deps.db, claim);
  if (marked !== 'persisted') return marked.state;
  // Renewed again right before the first copy: the marker's transaction may have taken seconds (a lost
  // connection restarts it), and no copy may start under a lease that could expire while it runs.
  await heartbeat();
  let problem = await copyAll(deps, req, heartbeat);
  await failpoint('after_effect_before_record', {
    kind: claim.kind,
    operationId: claim.operationId,
    stepId: claim.stepId,
  });
  if (problem === null) {
    const result = await applyAttachmentClaim(deps.db, claim, { copies: 'verified' });
    if ('state' in result) return result.state;
    problem = result.unclaimable;
  }
  return recordWithoutCopies(deps, claim, req, heartbeat, problem);
}

async function observe(deps: EffectDeps, step: StepRow): Promise<Observation> {
  const req = stepRequestOf(step, 'attachment_claim');
  const seen = await observeAttachmentClaimRows(deps.db, step, await anyCopyOf(deps.dataDir, req));
  if (seen.effect !== 'present_exact') return seen;
  const files: ObservedRow[] = [];
  let allThere = true;
  for (const item of req.attachments) {
    const d = await digestFile(claimedAttachmentPath(deps.dataDir, req.task_id, item.attachment_id));
    allThere &&= matchesItem(d, item);
    files.push({ table: 'attachment_files', key: item.attachment_id, row_sha256: d && rowHash(d) });
  }
  if (allThere) return seen;
  return {
    effect: 'conflict',
    evidence: rowSetEvidenceOf(step, 'conflict', 'rows are claimed but a claimed file is missing or changed', files),
  };
}

export const attachmentClaimHandler: StepHandler<'attachment_claim'> = {
  kind: 'attachment_claim',
  perform,
  observe,
  removeUnrecorded: removeUnrecordedCopies,
};
