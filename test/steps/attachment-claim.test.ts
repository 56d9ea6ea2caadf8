/**
 * `attachment_claim` against the real database and file system: verified
 * copies to the task's attachment directory, rows flipped with the step's
 * success in one transaction, stale deliveries, changed or missing staged
 * content, foreign rows, and observation. Runs on PostgreSQL and
 * MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { rowHash } from '../../src/canonical/hash';
import { validateStepEvidence } from '../../src/canonical/validate';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../src/storage/paths';
import { attachmentDoc } from '../../src/store/effects/row-documents';
import { sql, useTestDb } from '../support/db';
import { expectTyped } from '../support/ledger';
import {
  claimKind,
  createTask,
  effectSnapshot,
  loadStep,
  noHeartbeat,
  seedWithFiles,
  sha256,
  stepState,
} from './support';

const t = useTestDb();

async function setup() {
  const { ws, deps, files } = await seedWithFiles(t.db);
  const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
  const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
  const rows = () =>
    sql<Record<string, unknown>>(
      t.db,
      `SELECT id, workspace_id, owner_kind, staging_owner_id, task_id, claimed_by_operation_id, claimed_by_step_id,
              content_sha256, size, storage_path FROM task_message_attachments WHERE workspace_id = ? ORDER BY id`,
      [ws.workspaceId],
    );
  const claimed = (id: string) => claimedAttachmentPath(ws.dataDir, c.taskId, id);
  const staged = (id: string) => stagedAttachmentPath(ws.dataDir, ws.workspaceId, id);
  return {
    ws,
    deps,
    files,
    c,
    claim,
    rows,
    claimed,
    staged,
    snap: () => effectSnapshot(t.db, c.operationId, c.taskId),
  };
}

describe('attachment_claim perform', () => {
  it('copies every file with its hash, flips the rows to the task, and records exact evidence', async () => {
    const s = await setup();
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('succeeded');
    for (const id of s.ws.attachmentIds) {
      const copy = readFileSync(s.claimed(id));
      expect(sha256(copy)).toBe(sha256(s.files.get(id)!));
      expect(existsSync(s.staged(id))).toBe(true); // staged files are left for cleanup
    }
    expect(readdirSync(dirname(s.claimed(s.ws.attachmentIds[0]!))).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    const rows = await s.rows();
    for (const r of rows) {
      expect(r).toMatchObject({
        owner_kind: 'task',
        task_id: s.c.taskId,
        claimed_by_operation_id: s.c.operationId,
        claimed_by_step_id: s.claim.stepId,
      });
    }
    const { state, evidence } = await stepState(t.db, s.claim.stepId);
    expect(state).toBe('succeeded');
    validateStepEvidence(evidence, {
      kind: 'attachment_claim',
      step_key: s.claim.stepKey,
      request_sha256: s.claim.requestSha256,
    });
    expect(evidence!.observation).toEqual({
      operation_id: s.c.operationId,
      attachments: rows.map((r) => ({
        attachment_id: r.id,
        prior_owner_kind: 'staging',
        staging_owner_id: 'alice',
        current_owner_kind: 'task',
        task_id: s.c.taskId,
        content_sha256: sha256(s.files.get(r.id as string)!),
        size: s.files.get(r.id as string)!.length,
        row_sha256: rowHash(attachmentDoc(r)),
      })),
    });
  });

  it('a second delivery of the same claim is stale and changes nothing', async () => {
    const s = await setup();
    await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat);
    const before = await s.snap();
    await expectTyped(attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat), 'stale_claim');
    expect(await s.snap()).toBe(before);
    for (const id of s.ws.attachmentIds) expect(sha256(readFileSync(s.claimed(id)))).toBe(sha256(s.files.get(id)!));
  });

  it('staged content changed on disk: failed with absent proof, rows still staged, no claimed file', async () => {
    const s = await setup();
    const first = s.ws.attachmentIds[0]!;
    writeFileSync(s.staged(first), Buffer.from('tampered bytes'));
    const before = await s.rows();
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.error_code).toBe('content_changed');
    expect(st.evidence!.effect).toBe('absent_proven');
    expect(await s.rows()).toEqual(before);
    expect(existsSync(s.claimed(first))).toBe(false);
  });

  it('a staged file that vanished: failed (staged_file_missing)', async () => {
    const s = await setup();
    unlinkSync(s.staged(s.ws.attachmentIds[1]!));
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('staged_file_missing');
    expect((await s.rows()).every((r) => r.owner_kind === 'staging')).toBe(true);
  });

  it('a staged row whose content hash changed: failed (content_changed), nothing claimed', async () => {
    const s = await setup();
    await sql(t.db, 'UPDATE task_message_attachments SET content_sha256 = ? WHERE id = ?', [
      'b'.repeat(64),
      s.ws.attachmentIds[0]!,
    ]);
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('failed');
    expect((await stepState(t.db, s.claim.stepId)).error_code).toBe('content_changed');
    expect((await s.rows()).every((r) => r.owner_kind === 'staging' && r.task_id === null)).toBe(true);
  });

  it('a row claimed by another task: unknown with conflict evidence, the foreign claim untouched', async () => {
    const s = await setup();
    const other = randomUUID();
    await sql(t.db, "UPDATE task_message_attachments SET owner_kind = 'task', task_id = ? WHERE id = ?", [
      other,
      s.ws.attachmentIds[1]!,
    ]);
    expect(await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat)).toBe('unknown');
    const st = await stepState(t.db, s.claim.stepId);
    expect(st.evidence!.effect).toBe('conflict');
    const rows = await s.rows();
    expect(rows.find((r) => r.id === s.ws.attachmentIds[1])!.task_id).toBe(other);
    expect(rows.find((r) => r.id === s.ws.attachmentIds[0])!.owner_kind).toBe('staging');
  });
});

describe('attachment_claim observe', () => {
  it('absent while staged, present once claimed with the files, conflict when a claimed file changes or a row moves', async () => {
    const s = await setup();
    expect((await attachmentClaimHandler.observe(s.deps, await loadStep(t.db, s.claim.stepId))).effect).toBe(
      'absent_proven',
    );
    await attachmentClaimHandler.perform(s.deps, s.claim, noHeartbeat);
    const step = await loadStep(t.db, s.claim.stepId);
    const present = await attachmentClaimHandler.observe(s.deps, step);
    expect(present.effect).toBe('present_exact');
    expect(present.evidence.observation).toEqual(JSON.parse(step.evidence_json!).observation);

    const first = s.ws.attachmentIds[0]!;
    writeFileSync(s.claimed(first), Buffer.from('changed after claim'));
    expect((await attachmentClaimHandler.observe(s.deps, step)).effect).toBe('conflict');
    writeFileSync(s.claimed(first), s.files.get(first)!);
    expect((await attachmentClaimHandler.observe(s.deps, step)).effect).toBe('present_exact');

    await sql(t.db, "UPDATE task_message_attachments SET owner_kind = 'staging', task_id = NULL WHERE id = ?", [first]);
    const mixed = await attachmentClaimHandler.observe(s.deps, step);
    expect(mixed.effect).toBe('conflict');
    expect(mixed.evidence.effect).toBe('conflict');
  });
});
