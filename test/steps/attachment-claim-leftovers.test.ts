/**
 * `attachment_claim` leaves no copy without an owner: the step's ownership
 * marker is committed before the first copy, and every failure — a staged
 * file changed after some copies were made, a transient I/O error, rows
 * that cannot be claimed (foreign, expired) — removes the copies the step
 * made before it records, with the marker and the copies proven absent in
 * its evidence. Real database and file system; both dialects.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../src/storage/paths';
import { attachmentMarkerKey } from '../../src/kinds/attachment-claim/marker';
import { count, sql, useTestDb } from '../support/db';
import { claimKind, createTask, noHeartbeat, seedWithFiles, stepState } from './support';

const t = useTestDb();

async function setup() {
  const { ws, deps, files } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
  const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
  const [first, second] = ws.attachmentIds as [string, string];
  const claimedDir = dirname(claimedAttachmentPath(ws.dataDir, c.taskId, first));
  const staged = (id: string) => stagedAttachmentPath(ws.dataDir, ws.workspaceId, id);
  const markers = () => count(t.db, 'task_resource_markers', 'resource_key = ?', [attachmentMarkerKey(c.taskId)]);
  return { ws, deps, files, c, claim, first, second, claimedDir, staged, markers };
}

type Setup = Awaited<ReturnType<typeof setup>>;

/** A heartbeat that records, after each copy, which copies exist and whether the marker row is there. */
function watchingHeartbeat(s: Setup) {
  const seen: { copies: string[]; markers: number }[] = [];
  const beat = async () => {
    seen.push({ copies: existsSync(s.claimedDir) ? readdirSync(s.claimedDir) : [], markers: await s.markers() });
  };
  return { beat, seen };
}

async function expectNoCopies(s: Setup) {
  expect(existsSync(s.claimedDir) ? readdirSync(s.claimedDir) : []).toEqual([]);
  expect(await s.markers()).toBe(0);
}

describe('attachment_claim ownership marker', () => {
  it('is committed before the first copy and gone once the claim succeeded', async () => {
    const s = await setup();
    const hb = watchingHeartbeat(s);
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, hb.beat)).toBe('succeeded');
    // Beat 1 is before anything; beat 2 renews the lease right before the first copy, with the marker
    // committed; beat 3 follows the first copy: the marker was already there.
    expect(hb.seen[0]).toEqual({ copies: [], markers: 0 });
    expect(hb.seen[1]).toEqual({ copies: [], markers: 1 });
    expect(hb.seen[2]).toEqual({ copies: [s.first], markers: 1 });
    // Success hands the copies to the claimed rows (they name operation and step): no marker is left.
    expect(await s.markers()).toBe(0);
    const [step] = await sql<{ ownership_marker: string | null }>(
      t.db,
      'SELECT ownership_marker FROM task_creation_steps WHERE id = ?',
      [s.claim.stepId],
    );
    expect(step!.ownership_marker).toMatch(/^[0-9a-f]{64}$/);
    expect(readdirSync(s.claimedDir).sort()).toEqual([s.first, s.second].sort());
  });
});

describe('a failing attachment_claim removes its copies before it records', () => {
  it('permanent: a staged file changed after the first copy -> failed, no copy, marker and copies proven absent', async () => {
    const s = await setup();
    writeFileSync(s.staged(s.second), Buffer.from('tampered after planning'));
    const hb = watchingHeartbeat(s);
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, hb.beat)).toBe('failed');
    // The first file had been copied (under the marker) before the second one failed.
    expect(hb.seen[2]).toEqual({ copies: [s.first], markers: 1 });
    await expectNoCopies(s);
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('content_changed');
    expect(st.evidence!.effect).toBe('absent_proven');
    const rows = st.evidence!.observation.rows as { table: string; key: string; row_sha256: string | null }[];
    expect(rows.filter((r) => r.table === 'attachment_files')).toEqual(
      [s.first, s.second].sort().map((id) => ({ table: 'attachment_files', key: id, row_sha256: null })),
    );
    expect(rows.find((r) => r.table === 'task_resource_markers')).toEqual({
      table: 'task_resource_markers',
      key: attachmentMarkerKey(s.c.taskId),
      row_sha256: null,
    });
    const staged = await sql<{ owner_kind: string }>(
      t.db,
      'SELECT owner_kind FROM task_message_attachments WHERE workspace_id = ?',
      [s.ws.workspaceId],
    );
    expect(staged.every((r) => r.owner_kind === 'staging')).toBe(true);
  });

  it('transient: an I/O error on the second file -> retry_wait with no copy; the retry then claims everything', async () => {
    const s = await setup();
    // A directory where the staged file should be: reading it fails with EISDIR, an I/O error worth retrying.
    rmSync(s.staged(s.second));
    mkdirSync(s.staged(s.second));
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('retry_wait');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('file_io_error');
    await expectNoCopies(s);

    rmSync(s.staged(s.second), { recursive: true });
    writeFileSync(s.staged(s.second), s.files.get(s.second)!);
    await sql(t.db, 'UPDATE task_creation_steps SET next_attempt_at = NULL WHERE id = ?', [s.claim.stepId]);
    const again = await claimKind(t.db, s.c.auth, s.c.operationId, 'attachment_claim', 'w2');
    expect(await attachmentClaimHandler.perform(s.deps, again, noHeartbeat)).toBe('succeeded');
    expect(readdirSync(s.claimedDir).sort()).toEqual([s.first, s.second].sort());
    expect(await s.markers()).toBe(0);
  });

  it('rows claimed by another task after every copy was verified -> unknown, and still no copy of ours', async () => {
    const s = await setup();
    await sql(t.db, "UPDATE task_message_attachments SET owner_kind = 'task', task_id = ? WHERE id = ?", [
      randomUUID(),
      s.second,
    ]);
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('foreign_row');
    await expectNoCopies(s);
  });

  it('an expired upload (row and staged file gone) -> failed attachment_missing, no copy', async () => {
    const s = await setup();
    await sql(t.db, 'DELETE FROM task_message_attachments WHERE id = ?', [s.second]);
    rmSync(s.staged(s.second));
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('attachment_missing');
    expect(st.evidence!.effect).toBe('absent_proven');
    await expectNoCopies(s);
  });

  it('a stale claim removes nothing: the copies belong to whoever holds the step now', async () => {
    const s = await setup();
    writeFileSync(s.staged(s.second), Buffer.from('tampered after planning'));
    let beats = 0;
    const staleAfterFirstCopy = async () => {
      // Beat 1 before the marker, beat 2 after the first copy, beat 3 just before the removal: the lease is lost.
      if (++beats === 3) {
        await sql(t.db, 'UPDATE task_creation_steps SET lease_owner = ? WHERE id = ?', [
          'someone-else',
          s.claim.stepId,
        ]);
        throw new Error('stale_claim');
      }
    };
    await expect(attachmentClaimHandler.perform(s.deps, s.claim, staleAfterFirstCopy)).rejects.toThrow('stale_claim');
    expect(readdirSync(s.claimedDir)).toEqual([s.first]);
    expect(await s.markers()).toBe(1);
  });
});
