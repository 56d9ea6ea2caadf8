/**
 * After a creation with an `attachment_claim` step aborts because another
 * step failed permanently, none of its claimed copies is left on disk: a
 * succeeded claim is compensated (rows back to their staged owner, copies
 * deleted) before Abort; a claim that had failed transiently after copying
 * some files left none. The reaper's sweep does the compensation and Abort;
 * a workspace deletion's Abort hands a succeeded claim to a cleanup job with
 * its proof, which deletes the copies.
 * Real database and file system; both dialects.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runDueCleanupJobs } from '../../src/cleanup/worker';
import { runWorkspaceDeletion } from '../../src/lifecycle/workspace-deletion-runner';
import { silentLogger } from '../../src/log';
import { requestWorkspaceDeletion } from '../../src/store/workspace-deletion';
import { count, useTestDb } from '../support/db';
import { attachmentCreation } from '../runtime/attachment-support';

const t = useTestDb();

describe('an aborted creation leaves no claimed copy', () => {
  it('a succeeded claim is compensated by the sweep, then the creation aborts: no copy, rows staged again', async () => {
    const s = await attachmentCreation(t.db);
    expect(await s.performAttachments()).toBe('succeeded');
    expect(s.copies()).toEqual(s.ws.attachmentIds);
    expect(await s.failBranch()).toBe('failed');

    const report = await s.sweep();
    expect(report.recovered.retry_compensation).toBe(1);
    expect(report.recovered.abort_preparing).toBe(1);
    expect(await s.opState()).toBe('aborted');
    expect((await s.stepOf('attachment_claim')).compensation_state).toBe('compensated');
    expect(s.copies()).toEqual([]);
    expect(await s.markers()).toBe(0);
    expect(await s.ownerKinds()).toEqual(['staging', 'staging']);
  });

  it('a claim that failed transiently after its first copy, then another step failed: aborted with no copy', async () => {
    const s = await attachmentCreation(t.db);
    const second = s.ws.attachmentIds[1]!;
    // Reading the second staged file fails with EISDIR (a transient I/O error) after the first was copied.
    rmSync(s.staged(second));
    mkdirSync(s.staged(second));
    expect(await s.performAttachments()).toBe('retry_wait');
    expect(await s.failBranch()).toBe('failed');

    const report = await s.sweep();
    expect(report.recovered.abort_preparing).toBe(1);
    expect(await s.opState()).toBe('aborted');
    expect((await s.stepOf('attachment_claim')).state).toBe('retry_wait');
    expect(s.copies()).toEqual([]);
    expect(await s.markers()).toBe(0);
    expect(await s.ownerKinds()).toEqual(['staging', 'staging']);
  });
});

describe('a workspace deletion aborts a creation with an attachment claim', () => {
  async function deleteWorkspace(s: Awaited<ReturnType<typeof attachmentCreation>>) {
    const { deletion } = await requestWorkspaceDeletion(t.db, s.ws.workspaceId, 'root');
    const pass = await runWorkspaceDeletion(
      { db: t.db, dataDir: s.ws.dataDir, log: silentLogger() },
      deletion.id,
      s.ws.workspaceId,
    );
    expect(pass.handled.aborted).toBe(1);
    expect(await s.opState()).toBe('aborted');
  }

  it('a claim that failed transiently left no copy, so the aborted creation has none', async () => {
    const s = await attachmentCreation(t.db);
    const second = s.ws.attachmentIds[1]!;
    rmSync(s.staged(second));
    mkdirSync(s.staged(second));
    expect(await s.performAttachments()).toBe('retry_wait');
    await deleteWorkspace(s);
    expect(s.copies()).toEqual([]);
    expect(await s.markers()).toBe(0);
  });

  it('a succeeded claim is handed to a cleanup job with its proof; the job deletes the copies', async () => {
    const s = await attachmentCreation(t.db);
    expect(await s.performAttachments()).toBe('succeeded');
    await deleteWorkspace(s);
    expect((await s.stepOf('attachment_claim')).compensation_state).toBe('transferred');
    const jobs = "operation_id = ? AND kind = 'attachment_claim'";
    expect(await count(t.db, 'task_resource_cleanup_jobs', `${jobs} AND state = 'pending'`, [s.c.operationId])).toBe(1);
    const report = await runDueCleanupJobs({ ...s.deps, log: silentLogger() }, 'cleanup:test', {
      workspaceId: s.ws.workspaceId,
    });
    expect(report.done).toBe(1);
    expect(s.copies()).toEqual([]);
  });
});
