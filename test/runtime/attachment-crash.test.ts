/**
 * A worker killed after `attachment_claim` copied every file and before it
 * recorded (failpoint `after_effect_before_record`) leaves the step
 * `running`, its copies on disk and its ownership marker. The reaper's sweep
 * (lease backdated) turns the step `unknown`, removes the copies the marker
 * proves the step's, releases the marker and resolves the step `retry_wait`
 * from the proven absence; a retry then claims from scratch, and a creation
 * aborted instead keeps no copy. Real database and file system; both
 * dialects.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { attachmentClaimHandler } from '../../src/kinds/attachment-claim/step';
import { sql, useTestDb } from '../support/db';
import { noHeartbeat } from '../steps/support';
import { attachmentCreation } from './attachment-support';

const t = useTestDb();
afterEach(() => disarmAll());

async function crashAfterCopies(s: Awaited<ReturnType<typeof attachmentCreation>>) {
  armFailpoint(
    'after_effect_before_record',
    { kind: 'throw' },
    { match: (c) => c.kind === 'attachment_claim' && c.operationId === s.c.operationId },
  );
  const claim = await s.claimAttachments();
  await expect(attachmentClaimHandler.perform(s.deps, claim, noHeartbeat)).rejects.toBeInstanceOf(FailpointError);
  disarmAll();
  // The lost-ack window: every copy is there, under the step's marker, the rows still staged, the step running.
  expect(s.copies()).toEqual(s.ws.attachmentIds);
  expect(await s.markers()).toBe(1);
  expect((await s.stepOf('attachment_claim')).state).toBe('running');
  await sql(
    t.db,
    `UPDATE task_creation_steps SET lease_expires_at = ${t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE'}
      WHERE operation_id = ? AND state = 'running'`,
    [s.c.operationId],
  );
}

describe('a worker killed between the copies and the record', () => {
  it('is reconciled by the sweep without leaking copies, and the retry claims from scratch', async () => {
    const s = await attachmentCreation(t.db);
    await crashAfterCopies(s);
    const report = await s.sweep();
    expect(report.expiredSteps).toBe(1);
    expect(report.reconciled).toEqual({ succeeded: 0, retry: 1, stillUnknown: 0 });
    expect((await s.stepOf('attachment_claim')).state).toBe('retry_wait');
    expect(s.copies()).toEqual([]);
    expect(await s.markers()).toBe(0);
    expect(await s.ownerKinds()).toEqual(['staging', 'staging']);

    await sql(t.db, 'UPDATE task_creation_steps SET next_attempt_at = NULL WHERE operation_id = ?', [s.c.operationId]);
    expect(await s.performAttachments('w2')).toBe('succeeded');
    expect(s.copies()).toEqual(s.ws.attachmentIds);
    expect(await s.ownerKinds()).toEqual(['task', 'task']);
  });

  it('when another step failed permanently meanwhile, the sweep reconciles, then aborts with no copy left', async () => {
    const s = await attachmentCreation(t.db);
    await crashAfterCopies(s);
    expect(await s.failBranch()).toBe('failed');
    const report = await s.sweep();
    expect(report.reconciled.retry).toBe(1);
    expect(report.recovered.abort_preparing).toBe(1);
    expect(await s.opState()).toBe('aborted');
    expect(s.copies()).toEqual([]);
    expect(await s.markers()).toBe(0);
  });
});
