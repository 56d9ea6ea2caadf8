/**
 * Recovery of an `unknown` `attachment_claim` step (a worker died after its
 * marker committed and before its outcome was recorded): the copies it may
 * have made are garbage unless a row is claimed by the step, and the claim
 * records success in the same transaction that flips the rows — so for an
 * `unknown` step none is. With this step's marker in place (the proof that
 * the task's attachment directory holds its copies and nothing else's):
 * remove every copy and temp file of the request (I/O, no transaction), then
 * `releaseAttachmentMarker` (one transaction) deletes the marker while the
 * step is still `unknown` at the generation read here. Runs under the
 * operation's recovery claim, before the kind's `observe`; without the
 * marker it does nothing and the observation decides.
 */
import { readAttachmentMarker, releaseAttachmentMarker } from './marker';
import { stepRequestOf } from '../../store/effects/recording';
import { dbReader } from '../../store/effects/row-locks';
import type { OperationAuthority, StepRow } from '../../store/types';
import { removeCopiesOf } from './files';
import type { EffectDeps } from '../contract';

export async function removeUnrecordedCopies(deps: EffectDeps, step: StepRow, auth: OperationAuthority): Promise<void> {
  if (step.state !== 'unknown') return;
  const req = stepRequestOf(step, 'attachment_claim');
  const marker = await readAttachmentMarker(dbReader(deps.db), req, step);
  if (marker.presence !== 'ours') return;
  const claimed = await dbReader(deps.db)<{ id: string }>(
    `SELECT id FROM task_message_attachments WHERE claimed_by_step_id = ? AND id IN (${req.attachments.map(() => '?').join(', ')})`,
    [step.id, ...req.attachments.map((a) => a.attachment_id)],
  );
  // A row claimed by this step would make the copies the task's attachments: never removed here.
  if (claimed.length > 0) return;
  const removed = await removeCopiesOf(deps.dataDir, req);
  await releaseAttachmentMarker(deps.db, auth, step);
  deps.log.info(
    { operation_id: step.operation_id, step_id: step.id, removed },
    "an unknown attachment claim's unrecorded copies were removed and its marker released",
  );
}
