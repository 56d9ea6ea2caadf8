/**
 * `attachment_claim`: staged uploads become the task's attachments.
 *
 * perform:
 * 1. outside any transaction, after a heartbeat (a stale claim stops before
 *    any file is touched), for each attachment (ascending id, heartbeat
 *    after each): copy `stagedAttachmentPath(dataDir, workspace, id)` to a
 *    temp file beside `claimedAttachmentPath(dataDir, task, id)`, fsync,
 *    re-hash the temp file and require the request's SHA-256 and size, then
 *    rename it into place. A claimed file that already has the right content
 *    (an earlier attempt) is kept. A missing or changed staged file stops the
 *    copies as a permanent problem; any other I/O error as a transient one.
 * 2. `applyAttachmentClaim` (one transaction) flips the rows and records the
 *    outcome, or records the problem: with every row still exactly staged the
 *    step fails (`failed` / `retry_wait`, `absent_proven`), otherwise it is
 *    `unknown`.
 * Staged files are left in place: removing them is a later cleanup concern.
 * Copies already made when a later file fails stay at their claimed path;
 * without claimed rows they are inert, and a retry reuses them.
 *
 * observe: rows claimed exactly by this step and every claimed file present
 * with the right hash and size -> present; every row still exactly staged ->
 * absent; anything else -> conflict.
 */
import { failpoint } from '../failpoints';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { AttachmentClaimItem } from '../canonical/types';
import {
  applyAttachmentClaim,
  observeAttachmentClaimRows,
  type AttachmentFileProblem,
} from '../store/effects/attachment-claim';
import { requestOf, rowSetEvidenceOf, stepRequestOf, type ObservedRow } from '../store/effects/recording';
import { rowHash } from '../store/effects/row-documents';
import { claimedAttachmentPath, stagedAttachmentPath } from '../storage/paths';
import type { StepClaim, StepRow } from '../store/types';
import type { EffectDeps, Observation, StepHandler } from './types';

export interface FileDigest {
  sha256: string;
  size: number;
}

/** SHA-256 and size of a file, or null when it does not exist. */
export async function digestFile(path: string): Promise<FileDigest | null> {
  const hash = createHash('sha256');
  let size = 0;
  try {
    for await (const chunk of createReadStream(path)) {
      const buf = chunk as Buffer;
      hash.update(buf);
      size += buf.length;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return { sha256: hash.digest('hex'), size };
}

const matches = (d: FileDigest | null, item: AttachmentClaimItem) =>
  d !== null && d.sha256 === item.content_sha256 && d.size === item.size;

/** Copies one staged file into place through a verified temp file; returns the problem, if any. */
async function copyVerified(
  src: string,
  dst: string,
  item: AttachmentClaimItem,
): Promise<AttachmentFileProblem | null> {
  await mkdir(dirname(dst), { recursive: true });
  const tmp = `${dst}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    try {
      await pipeline(createReadStream(src), createWriteStream(tmp, { flags: 'wx' }));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && (err as NodeJS.ErrnoException).path === src) {
        return {
          class: 'permanent',
          code: 'staged_file_missing',
          message: `staged file of ${item.attachment_id} is gone`,
        };
      }
      throw err;
    }
    const fh = await open(tmp, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    if (!matches(await digestFile(tmp), item)) {
      return {
        class: 'permanent',
        code: 'content_changed',
        message: `staged file of ${item.attachment_id} no longer has the planned SHA-256 and size`,
      };
    }
    await rename(tmp, dst);
    return null;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

async function copyAll(
  deps: EffectDeps,
  claim: StepClaim,
  heartbeat: () => Promise<void>,
): Promise<AttachmentFileProblem | null> {
  const req = requestOf(claim, 'attachment_claim');
  // A stale delivery stops here (the lease renewal is a claim CAS) before touching any file.
  await heartbeat();
  for (const item of req.attachments) {
    const dst = claimedAttachmentPath(deps.dataDir, req.task_id, item.attachment_id);
    const src = stagedAttachmentPath(deps.dataDir, req.workspace_id, item.attachment_id);
    let problem: AttachmentFileProblem | null = null;
    try {
      if (!matches(await digestFile(dst), item)) problem = await copyVerified(src, dst, item);
    } catch (err) {
      problem = { class: 'transient', code: 'file_io_error', message: (err as Error).message.slice(0, 2000) };
    }
    if (problem !== null) return problem;
    await heartbeat();
  }
  return null;
}

async function perform(deps: EffectDeps, claim: StepClaim, heartbeat: () => Promise<void>) {
  const problem = await copyAll(deps, claim, heartbeat);
  await failpoint('after_effect_before_record', {
    kind: claim.kind,
    operationId: claim.operationId,
    stepId: claim.stepId,
  });
  const outcome = await applyAttachmentClaim(deps.db, claim, problem);
  return outcome.state;
}

async function observe(deps: EffectDeps, step: StepRow): Promise<Observation> {
  const seen = await observeAttachmentClaimRows(deps.db, step);
  if (seen.effect !== 'present_exact') return seen;
  const req = stepRequestOf(step, 'attachment_claim');
  const files: ObservedRow[] = [];
  let allThere = true;
  for (const item of req.attachments) {
    const d = await digestFile(claimedAttachmentPath(deps.dataDir, req.task_id, item.attachment_id));
    allThere &&= matches(d, item);
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
};
