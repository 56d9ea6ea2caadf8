/**
 * The recovery claim fences its action (issue 13, gap 4): a Store call made
 * under a recovery claim that is no longer the operation's live one (taken
 * over after its lease expired, or released) writes nothing, exactly like a
 * stale step claim; the live claim's call goes through. And the Store's Abort
 * itself requires a permanently failed step, whoever asks. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { runPendingCompensations } from '../../src/compensation/run';
import { abortTaskCreation } from '../../src/store/abort';
import { claimTaskCreationRecovery, finishTaskCreationRecovery } from '../../src/store/recovery';
import type { OperationAuthority } from '../../src/store/types';
import { failedCreation, seeded, useFakeProvider } from '../compensation/support';
import { sql, useTestDb } from '../support/db';
import { begin, expectTyped, snapshot } from '../support/ledger';

const t = useTestDb();
const fake = useFakeProvider();
let pr = 1200;

const fenced = (operationId: string, owner: string, generation: number): OperationAuthority => ({
  kind: 'operation',
  operationId,
  actor: owner,
  recovery: { generation, owner },
});

async function expireRecoveryLease(operationId: string): Promise<void> {
  const past = t.db.dialect === 'postgres' ? "now() - interval '1 minute'" : 'NOW(3) - INTERVAL 1 MINUTE';
  await sql(t.db, `UPDATE task_creation_operations SET recovery_lease_expires_at = ${past} WHERE id = ?`, [
    operationId,
  ]);
}

describe('a recovery claim fences its action', () => {
  it('an action under a claim taken over writes nothing; under the live claim it runs', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['workspace_attachment'], 'attachment_claim', pr);
    await runPendingCompensations(c.deps, c.operationId, 'comp');
    const first = await claimTaskCreationRecovery(t.db, c.operationId, 'reaper-a', 60_000);
    if (!first.claimed) throw new Error('not claimed');
    expect(first.action).toBe('abort_preparing');
    // reaper-a stalls past its lease; reaper-b takes the operation over.
    await expireRecoveryLease(c.operationId);
    const second = await claimTaskCreationRecovery(t.db, c.operationId, 'reaper-b', 60_000);
    if (!second.claimed) throw new Error('not claimed');
    expect(second.generation).toBe(first.generation + 1);
    const [op] = await sql<{ generation: number | string }>(
      t.db,
      'SELECT generation FROM task_creation_operations WHERE id = ?',
      [c.operationId],
    );
    expect(Number(op!.generation)).toBe(2);

    const before = await snapshot(t.db, c.operationId, c.taskId);
    await expectTyped(
      abortTaskCreation(t.db, fenced(c.operationId, 'reaper-a', first.generation), 'step_failed_permanently'),
      'stale_claim',
    );
    expect(await snapshot(t.db, c.operationId, c.taskId)).toBe(before);
    expect(
      (await abortTaskCreation(t.db, fenced(c.operationId, 'reaper-b', second.generation), 'step_failed_permanently'))
        .replayed,
    ).toBe(false);
    await finishTaskCreationRecovery(t.db, second);
  });

  it('an action whose claim was released writes nothing', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const c = await failedCreation(t.db, ws, ['workspace_attachment'], 'attachment_claim', pr);
    const claim = await claimTaskCreationRecovery(t.db, c.operationId, 'reaper-a', 60_000);
    if (!claim.claimed) throw new Error('not claimed');
    expect(claim.action).toBe('retry_compensation');
    await finishTaskCreationRecovery(t.db, claim);
    const before = await snapshot(t.db, c.operationId, c.taskId);
    const report = await runPendingCompensations(
      c.deps,
      c.operationId,
      'reaper-a',
      60_000,
      fenced(c.operationId, 'reaper-a', claim.generation),
    );
    expect(report).toEqual({ compensated: 0, transferred: 0, retry: 0, unknown: 0 });
    expect(await snapshot(t.db, c.operationId, c.taskId)).toBe(before);
  });
});

describe("the Store's Abort", () => {
  it('refuses a creation with no permanently failed step, whoever asks, with zero writes', async () => {
    const ws = await seeded(t.db, fake.server, ++pr);
    const open = await begin(t.db, ws, { title: 'nothing failed' });
    const before = await snapshot(t.db, open.operationId, open.task.id);
    await expectTyped(
      abortTaskCreation(t.db, { kind: 'handle', handle: open.handle! }, 'caller'),
      'creation_state_conflict',
    );
    await expectTyped(
      abortTaskCreation(t.db, { kind: 'operation', operationId: open.operationId, actor: 'op' }, 'x'),
      'creation_state_conflict',
    );
    expect(await snapshot(t.db, open.operationId, open.task.id)).toBe(before);
  });
});
