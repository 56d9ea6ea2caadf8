/**
 * Expiry of staged uploads that no creation claimed (the reaper's sweep runs
 * it, src/runtime/reaper.ts; TASKLEDGER_STAGED_TTL_MS, default 7 days).
 *
 * `expireStagedUploads`: batches of ExpireStagedAttachments (one short
 * transaction each, rows only), and after each commit the batch's staged
 * files are unlinked — the file the upload wrote,
 * `stagedAttachmentPath(dataDir, workspace, id)` (gone already is fine). A
 * crash between the commit and the unlink leaves a file without a row.
 *
 * `removeOrphanStagedFiles`: under `<dataDir>/staging/<workspace>/`, a file
 * named by an attachment ID whose row is gone and that is older than the TTL
 * (by mtime) is removed, and so is a temp file (`<id>.<x>.tmp` of an upload,
 * `<id>.<x>.restore` of a compensation) older than the TTL: nothing writes a
 * row for such a file any more (an upload writes its row right after its
 * file). Files with a row — staged or claimed (a claimed row keeps its
 * staged storage path) — and any other name are left alone. Reads are plain;
 * no transaction.
 * I/O errors on one file are logged and left for a later pass.
 */
import { lstat, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readRows, type Db } from '../db/tx';
import type { Logger } from '../log';
import { stagedAttachmentPath } from '../storage/paths';
import { expireStagedAttachments } from '../store/staged-expiry';

export { DEFAULT_STAGED_TTL_MS } from '../app/config';
/** Why 200 rows and 5 batches: one pass stays a few short transactions; the next pass continues. */
const BATCH = 200;
const MAX_BATCHES = 5;

const ID_NAME = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TEMP_NAME = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9a-f-]+\.(tmp|restore)$/;

export interface StagedExpiryDeps {
  db: Db;
  dataDir: string;
  log: Logger;
}

export interface StagedExpiryOptions {
  ttlMs: number;
  /** Only this workspace's uploads (a scoped reaper; tests sharing a database). */
  workspaceId?: string;
}

async function removeIfThere(path: string): Promise<boolean> {
  try {
    await unlink(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** Expired staged rows deleted (and their files unlinked after each commit); rows kept because still planned. */
export async function expireStagedUploads(
  deps: StagedExpiryDeps,
  options: StagedExpiryOptions,
): Promise<{ expired: number; kept: number }> {
  const out = { expired: 0, kept: 0 };
  for (let i = 0; i < MAX_BATCHES; i++) {
    const batch = await expireStagedAttachments(deps.db, { ...options, limit: BATCH });
    out.expired += batch.expired.length;
    out.kept += batch.kept;
    for (const row of batch.expired) {
      const path = stagedAttachmentPath(deps.dataDir, row.workspace_id, row.id);
      if (row.storage_path !== path) {
        deps.log.warn({ attachment_id: row.id, storage_path: row.storage_path }, 'expired upload stored elsewhere');
      }
      await removeIfThere(path).catch((err: unknown) =>
        deps.log.warn({ err, attachment_id: row.id }, 'could not unlink an expired upload; the orphan pass retries'),
      );
    }
    if (!batch.full || batch.expired.length === 0) break;
  }
  if (out.expired > 0) deps.log.info(out, 'expired staged uploads removed');
  return out;
}

/** Removes one file, logging (not throwing) an error other than "already gone". */
function tryRemove(deps: StagedExpiryDeps, path: string): Promise<boolean> {
  return removeIfThere(path).catch((err: unknown) => {
    deps.log.warn({ err, path }, 'could not remove an orphan staged file; a later pass retries');
    return false;
  });
}

async function namesIn(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** Files under staging/ older than the TTL that no row owns; returns how many were removed. */
export async function removeOrphanStagedFiles(deps: StagedExpiryDeps, options: StagedExpiryOptions): Promise<number> {
  const root = join(deps.dataDir, 'staging');
  const workspaces = options.workspaceId === undefined ? await namesIn(root) : [options.workspaceId];
  const before = Date.now() - options.ttlMs;
  let removed = 0;
  for (const ws of workspaces) {
    const dir = join(root, ws);
    const ids: string[] = [];
    for (const name of await namesIn(dir)) {
      const isId = ID_NAME.test(name);
      if (!isId && !TEMP_NAME.test(name)) continue;
      const st = await lstat(join(dir, name)).catch(() => null);
      if (st === null || !st.isFile() || st.mtimeMs >= before) continue;
      if (isId) ids.push(name);
      else if (await tryRemove(deps, join(dir, name))) removed++;
    }
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      const rows = await readRows<{ id: string }>(
        deps.db,
        `SELECT id FROM task_message_attachments WHERE id IN (${chunk.map(() => '?').join(', ')})`,
        chunk,
      );
      const owned = new Set(rows.map((r) => r.id));
      for (const id of chunk.filter((x) => !owned.has(x))) {
        if (await tryRemove(deps, join(dir, id))) removed++;
      }
    }
  }
  if (removed > 0) deps.log.info({ removed }, 'orphan staged files removed');
  return removed;
}

/** Why a minute: expiry is measured in days; looking every sweep (5 s) would only repeat an empty index read. */
const EXPIRY_EVERY_MS = 60_000;
/** Why an hour: the orphan pass lists every staged file; orphans only come from a crash between commit and unlink. */
const ORPHANS_EVERY_MS = 60 * 60_000;

/** When a reaper last ran each pass (ms since the epoch; 0: never). */
export interface StagedPassClock {
  expiry: number;
  orphans: number;
}

/** The reaper's share: expiry at most once a minute, the orphan pass at most once an hour (the first call runs both). */
export async function runStagedPasses(
  deps: StagedExpiryDeps,
  options: StagedExpiryOptions,
  clock: StagedPassClock,
): Promise<{ expired: number; kept: number; orphans: number }> {
  const out = { expired: 0, kept: 0, orphans: 0 };
  const now = Date.now();
  if (now - clock.expiry >= EXPIRY_EVERY_MS) {
    clock.expiry = now;
    Object.assign(out, await expireStagedUploads(deps, options));
  }
  if (now - clock.orphans >= ORPHANS_EVERY_MS) {
    clock.orphans = now;
    out.orphans = await removeOrphanStagedFiles(deps, options);
  }
  return out;
}
