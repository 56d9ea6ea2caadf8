/**
 * The file half of `attachment_claim` (I/O only; never call it inside a SQL
 * transaction): digests, verified copies of staged files into the task's
 * attachment directory `<dataDir>/attachments/<task>/`, and the removal of
 * those copies.
 *
 * Removal acts only on what the step's ownership marker covers (the caller
 * holds that proof, src/kinds/attachment-claim/marker.ts): for each
 * requested attachment, the copy `<id>` and a temp file `<id>.<hex>.tmp`
 * that a killed copy left; anything else in the directory is left alone.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rmdir, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { AttachmentClaimItem, AttachmentClaimRequest } from '../../canonical/types';
import type { AttachmentFileProblem } from './ledger';
import { claimedAttachmentPath } from '../../storage/paths';

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

export const matchesItem = (d: FileDigest | null, item: AttachmentClaimItem): boolean =>
  d !== null && d.sha256 === item.content_sha256 && d.size === item.size;

/** Copies one staged file into place through a verified temp file; returns the problem, if any. */
export async function copyVerified(
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
    if (!matchesItem(await digestFile(tmp), item)) {
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

/** The task's attachment directory of a request. */
export function claimDirectory(dataDir: string, req: AttachmentClaimRequest): string {
  return dirname(claimedAttachmentPath(dataDir, req.task_id, req.attachments[0]!.attachment_id));
}

/** The names in the task's directory that are the request's copies or their temp files. */
async function copiesOf(dataDir: string, req: AttachmentClaimRequest): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(claimDirectory(dataDir, req));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const ids = new Set(req.attachments.map((a) => a.attachment_id));
  return names.filter((n) => {
    const id = n.slice(0, 36);
    return ids.has(id) && (n.length === 36 || /^\.[0-9a-f]{12}\.tmp$/.test(n.slice(36)));
  });
}

/** Whether any copy (or temp file) of the request is on disk. */
export async function anyCopyOf(dataDir: string, req: AttachmentClaimRequest): Promise<boolean> {
  return (await copiesOf(dataDir, req)).length > 0;
}

/**
 * Removes the request's copies and temp files (gone already is fine), then
 * the directory when it is empty. Returns how many files it removed.
 */
export async function removeCopiesOf(dataDir: string, req: AttachmentClaimRequest): Promise<number> {
  const dir = claimDirectory(dataDir, req);
  let removed = 0;
  for (const name of await copiesOf(dataDir, req)) {
    try {
      await unlink(join(dir, name));
      removed++;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  await rmdir(dir).catch(() => undefined);
  return removed;
}
