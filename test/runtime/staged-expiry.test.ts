/**
 * Staged uploads that no creation claimed expire: the reaper's sweep deletes
 * a staged row older than the TTL (rows backdated in SQL, no sleeping) and
 * then its file; a row that a creation not yet ended plans to claim, or a
 * claimed row, is never expired; a file left without its row (a crash
 * between the commit and the unlink) is removed by the orphan pass once it
 * is older than the TTL. Real database and file system; both dialects.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFromEnv, DEFAULT_STAGED_TTL_MS } from '../../src/app/config';
import type { Db } from '../../src/db/tx';
import { silentLogger } from '../../src/log';
import { sweepOnce, type ReaperDeps } from '../../src/runtime/reaper';
import { removeOrphanStagedFiles } from '../../src/runtime/staged-expiry';
import { stageAttachment } from '../../src/setup/attachments';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { stagedAttachmentPath } from '../../src/storage/paths';
import { abortTaskCreation } from '../../src/store/abort';
import { expireStagedAttachments } from '../../src/store/staged-expiry';
import { failTaskCreationStep } from '../../src/store/step-results';
import { count, sql, useTestDb } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { claimKind, createTask, effectDeps, noHeartbeat, seedWithFiles } from '../steps/support';

const t = useTestDb();
const DAY_MS = 24 * 60 * 60 * 1000;

function reaper(db: Db, ws: SeededWorkspace, stagedTtlMs?: number): ReaperDeps {
  return {
    effects: effectDeps(db, ws.dataDir),
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor: 'reaper:staged',
    workspaceId: ws.workspaceId,
    ...(stagedTtlMs === undefined ? {} : { stagedTtlMs }),
  };
}

/** Makes rows look staged `days` ago (created and last made staged). */
async function backdate(db: Db, ids: string[], days: number) {
  const ago = db.dialect === 'postgres' ? `now() - interval '${days} days'` : `NOW(3) - INTERVAL ${days} DAY`;
  await sql(
    db,
    `UPDATE task_message_attachments SET created_at = ${ago}, updated_at = ${ago} WHERE id IN (${ids.map(() => '?').join(', ')})`,
    ids,
  );
}

const rowExists = (id: string) => count(t.db, 'task_message_attachments', 'id = ?', [id]).then((n) => n === 1);

async function upload(ws: SeededWorkspace, text: string) {
  return stageAttachment(t.db, {
    dataDir: ws.dataDir,
    workspaceId: ws.workspaceId,
    ownerPrincipalId: 'alice',
    bytes: Buffer.from(text),
  });
}

/** A file's modification time set `ms` into the past. */
function age(path: string, ms: number) {
  const then = new Date(Date.now() - ms);
  utimesSync(path, then, then);
}

describe('staged uploads expire after the TTL', () => {
  it('the sweep deletes an expired staged row and then its file; a fresh upload stays', async () => {
    const ws = await seedWorkspace(t.db);
    const old = await upload(ws, 'an abandoned draft');
    const fresh = await upload(ws, 'a draft in progress');
    await backdate(t.db, [old.attachment_id], 8);

    const report = await sweepOnce(reaper(t.db, ws));
    expect(report.staged).toMatchObject({ expired: 1, kept: 0 });
    expect(await rowExists(old.attachment_id)).toBe(false);
    expect(existsSync(old.storage_path)).toBe(false);
    expect(await rowExists(fresh.attachment_id)).toBe(true);
    expect(existsSync(fresh.storage_path)).toBe(true);
  });

  it('the TTL is configurable: a shorter one expires a younger upload', async () => {
    const ws = await seedWorkspace(t.db);
    const a = await upload(ws, 'two days old');
    await backdate(t.db, [a.attachment_id], 2);
    expect((await sweepOnce(reaper(t.db, ws))).staged.expired).toBe(0);
    expect((await sweepOnce(reaper(t.db, ws, DAY_MS))).staged.expired).toBe(1);
    expect(existsSync(a.storage_path)).toBe(false);
    // A TTL of weeks (more milliseconds than a 32-bit integer holds) works on both dialects.
    const b = await upload(ws, 'a month old');
    await backdate(t.db, [b.attachment_id], 31);
    const month = await expireStagedAttachments(t.db, { ttlMs: 30 * DAY_MS, limit: 10, workspaceId: ws.workspaceId });
    expect(month.expired.map((r) => r.id)).toEqual([b.attachment_id]);
    expect(configFromEnv({}).stagedTtlMs).toBe(DEFAULT_STAGED_TTL_MS);
    expect(DEFAULT_STAGED_TTL_MS).toBe(7 * DAY_MS);
    expect(configFromEnv({ TASKLEDGER_STAGED_TTL_MS: '3600000' }).stagedTtlMs).toBe(3_600_000);
    expect(() => configFromEnv({ TASKLEDGER_STAGED_TTL_MS: '-1' })).toThrow(/TASKLEDGER_STAGED_TTL_MS/);
  });

  it('never an upload a creation not yet ended plans to claim; once it aborted, the upload expires', async () => {
    const { ws } = await seedWithFiles(t.db);
    const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
    await backdate(t.db, ws.attachmentIds, 8);
    const staged = ws.attachmentIds.map((id) => stagedAttachmentPath(ws.dataDir, ws.workspaceId, id));

    expect((await sweepOnce(reaper(t.db, ws))).staged).toMatchObject({ expired: 0, kept: 2 });
    for (const id of ws.attachmentIds) expect(await rowExists(id)).toBe(true);
    for (const p of staged) expect(existsSync(p)).toBe(true);

    const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
    expect(await failTaskCreationStep(t.db, claim, permanentFailure(claim))).toBe('failed');
    await abortTaskCreation(t.db, c.auth, 'step_failed_permanently');
    expect((await sweepOnce(reaper(t.db, ws))).staged).toMatchObject({ expired: 2, kept: 0 });
    for (const id of ws.attachmentIds) expect(await rowExists(id)).toBe(false);
    for (const p of staged) expect(existsSync(p)).toBe(false);
  });

  it('never a claimed upload, however old: its row and its file stay', async () => {
    const { ws, deps } = await seedWithFiles(t.db);
    const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
    const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
    expect(await attachmentClaimHandler.perform(deps, claim, noHeartbeat)).toBe('succeeded');
    await backdate(t.db, ws.attachmentIds, 30);
    const batch = await expireStagedAttachments(t.db, { ttlMs: DAY_MS, limit: 10, workspaceId: ws.workspaceId });
    expect(batch.expired).toEqual([]);
    for (const id of ws.attachmentIds) {
      expect(await rowExists(id)).toBe(true);
      const path = stagedAttachmentPath(ws.dataDir, ws.workspaceId, id);
      age(path, 30 * DAY_MS);
      expect(existsSync(path)).toBe(true);
    }
    // The orphan pass leaves them too: each file has its (claimed) row.
    expect(await removeOrphanStagedFiles(deps, { ttlMs: DAY_MS, workspaceId: ws.workspaceId })).toBe(0);
    for (const id of ws.attachmentIds)
      expect(existsSync(stagedAttachmentPath(ws.dataDir, ws.workspaceId, id))).toBe(true);
  });
});

describe('files left without their row', () => {
  it('a crash between the commit and the unlink leaves the file; the orphan pass removes it once older than the TTL', async () => {
    const ws = await seedWorkspace(t.db);
    const deps = effectDeps(t.db, ws.dataDir);
    const old = await upload(ws, 'expired, then the reaper died');
    await backdate(t.db, [old.attachment_id], 8);
    // The Store half alone: the rows are deleted and committed, the files are never unlinked.
    const batch = await expireStagedAttachments(t.db, {
      ttlMs: DEFAULT_STAGED_TTL_MS,
      limit: 10,
      workspaceId: ws.workspaceId,
    });
    expect(batch.expired.map((r) => r.id)).toEqual([old.attachment_id]);
    expect(await rowExists(old.attachment_id)).toBe(false);
    expect(existsSync(old.storage_path)).toBe(true);

    // Younger than the TTL (the file's own age): left alone, it might be an upload whose row is still coming.
    const options = { ttlMs: DEFAULT_STAGED_TTL_MS, workspaceId: ws.workspaceId };
    expect(await removeOrphanStagedFiles(deps, options)).toBe(0);
    expect(existsSync(old.storage_path)).toBe(true);

    age(old.storage_path, 8 * DAY_MS);
    const dir = dirname(old.storage_path);
    const staleTemp = `${dir}/${randomUUID()}.${randomUUID()}.tmp`;
    const freshOrphan = `${dir}/${randomUUID()}`;
    const foreign = `${dir}/notes.txt`;
    mkdirSync(dir, { recursive: true });
    for (const p of [staleTemp, freshOrphan, foreign]) writeFileSync(p, 'x');
    age(staleTemp, 8 * DAY_MS);
    age(foreign, 8 * DAY_MS);
    expect(await removeOrphanStagedFiles(deps, options)).toBe(2);
    expect(existsSync(old.storage_path)).toBe(false);
    expect(existsSync(staleTemp)).toBe(false);
    expect(existsSync(freshOrphan)).toBe(true);
    expect(existsSync(foreign)).toBe(true);
  });

  it('the sweep runs the orphan pass too (the first sweep of a reaper), and expiry at most once a minute', async () => {
    const ws = await seedWorkspace(t.db);
    const deps = reaper(t.db, ws);
    const orphan = stagedAttachmentPath(ws.dataDir, ws.workspaceId, randomUUID());
    mkdirSync(dirname(orphan), { recursive: true });
    writeFileSync(orphan, 'no row ever');
    age(orphan, 8 * DAY_MS);
    expect((await sweepOnce(deps)).staged.orphans).toBe(1);
    expect(existsSync(orphan)).toBe(false);

    const late = await upload(ws, 'expired after the first sweep');
    await backdate(t.db, [late.attachment_id], 8);
    expect((await sweepOnce(deps)).staged.expired).toBe(0);
    expect(await rowExists(late.attachment_id)).toBe(true);
    expect((await sweepOnce(reaper(t.db, ws))).staged.expired).toBe(1);
  });
});
