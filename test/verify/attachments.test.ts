/**
 * `taskledger verify`'s attachment pass (with observation): a clean
 * workspace reports nothing; a staged upload whose file is gone, a copy left
 * on disk by an aborted creation, and an attachment claim's marker left by
 * an ended creation are each reported as `attachment_file`; without
 * observation the pass does not run. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { claimedAttachmentPath, stagedAttachmentPath } from '../../src/storage/paths';
import { abortTaskCreation } from '../../src/store/abort';
import { failTaskCreationStep } from '../../src/store/step-results';
import { verifyLedger } from '../../src/verify/run';
import { sql, useTestDb } from '../support/db';
import { permanentFailure } from '../support/evidence';
import { seedWorkspace, type SeededWorkspace } from '../support/seed';
import { claimKind, createTask, effectDeps } from '../steps/support';

const t = useTestDb();

async function findings(ws: SeededWorkspace, observe = true) {
  const report = await verifyLedger(
    { db: t.db, effects: effectDeps(t.db, ws.dataDir, 5000), handlers: defaultStepHandlers },
    { workspaceId: ws.workspaceId, observe, maxDrift: 100, pageSize: 50 },
  );
  return report.drift.map((d) => `${d.code} ${d.operation_id} ${d.subject}: ${d.message}`);
}

describe('verify: attachment files', () => {
  it('reports a missing staged file, an aborted creation’s leftover copy and its leftover marker', async () => {
    const ws = await seedWorkspace(t.db);
    const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
    const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
    expect(await failTaskCreationStep(t.db, claim, permanentFailure(claim))).toBe('failed');
    await abortTaskCreation(t.db, c.auth, 'step_failed_permanently');
    expect(await findings(ws)).toEqual([]);

    // A copy a dead worker wrote after the creation ended (nothing owns it), and a marker it left.
    const [first, second] = ws.attachmentIds as [string, string];
    const copy = claimedAttachmentPath(ws.dataDir, c.taskId, first);
    mkdirSync(dirname(copy), { recursive: true });
    writeFileSync(copy, 'left behind');
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO task_resource_markers (resource_key, workspace_id, task_id, operation_id, step_id, kind, marker_sha256, created_at)
       VALUES (?, ?, ?, ?, ?, 'attachment_copies', ?, ${now})`,
      [`attachments:${c.taskId}`, ws.workspaceId, c.taskId, c.operationId, claim.stepId, 'c'.repeat(64)],
    );
    // An upload whose file vanished.
    rmSync(stagedAttachmentPath(ws.dataDir, ws.workspaceId, second));

    expect((await findings(ws)).sort()).toEqual(
      [
        `attachment_file ${c.operationId} attachments/${c.taskId}: the creation aborted but 1 file(s) of its attachment claim are still on disk`,
        `attachment_file ${c.operationId} marker attachments:${c.taskId}: the creation is aborted but its attachment claim's marker is still there (copies may be left)`,
        `attachment_file  staged attachment ${second}: its file ${stagedAttachmentPath(ws.dataDir, ws.workspaceId, second)} is missing`,
      ].sort(),
    );
    expect(await findings(ws, false)).toEqual([]);
  });

  it('a leftover copy that an open cleanup job owns is not reported', async () => {
    const ws = await seedWorkspace(t.db);
    const c = await createTask(t.db, ws, { attachments: ws.attachmentIds });
    const claim = await claimKind(t.db, c.auth, c.operationId, 'attachment_claim');
    await failTaskCreationStep(t.db, claim, permanentFailure(claim));
    await abortTaskCreation(t.db, c.auth, 'step_failed_permanently');
    const copy = claimedAttachmentPath(ws.dataDir, c.taskId, ws.attachmentIds[0]!);
    mkdirSync(dirname(copy), { recursive: true });
    writeFileSync(copy, 'owned by a job');
    const now = t.db.dialect === 'postgres' ? 'now()' : 'NOW(3)';
    await sql(
      t.db,
      `INSERT INTO task_resource_cleanup_jobs (id, workspace_id, task_id, operation_id, step_id, kind, reason, proof_json, proof_sha256, state, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, 'attachment_claim', 'effect_changed', '{}', ?, 'unknown', ${now}, ${now})`,
      [randomUUID(), ws.workspaceId, c.taskId, c.operationId, claim.stepId, 'd'.repeat(64)],
    );
    expect((await findings(ws)).filter((f) => f.startsWith('attachment_file'))).toEqual([]);
  });
});
