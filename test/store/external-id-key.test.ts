/**
 * A guard remembers that a task holds no external ID (an ID is only ever set
 * by Begin and only ever cleared), and then sends the whole task chain ahead
 * without reading the ID first. A task that holds one still has Complete and
 * Abort take its external-ID key lock (5.1): a transaction holding that key
 * keeps them waiting until it commits, however often the operation was
 * guarded before. Both dialects.
 */
import { describe, expect, it } from 'vitest';
import { TIER } from '../../src/db/lock-plan';
import { runTransaction } from '../../src/db/tx';
import { abortTaskCreation } from '../../src/store/abort';
import { completeTaskCreation, completeTaskCreationPhaseA } from '../../src/store/complete';
import { externalIdKeyDigest } from '../../src/store/lock-keys';
import type { OperationAuthority } from '../../src/store/types';
import { useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

/** Holds the external-ID key in a transaction of its own until `release` is called. */
function holdKey(workspaceId: string, externalId: string) {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let held!: () => void;
  const isHeld = new Promise<void>((r) => (held = r));
  const done = runTransaction(t.db, 'HoldExternalIdKey', async (tx) => {
    await tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(workspaceId, externalId));
    held();
    await released;
  });
  return { isHeld, release, done };
}

/** Whether `p` settles within `ms`. */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  const timeout = new Promise<false>((r) => setTimeout(() => r(false), ms));
  return Promise.race([p.then(() => true), timeout]);
}

/** Starts `command` while another transaction holds the key: it must still be waiting after 400 ms; then frees it. */
async function waitsForKey<T>(
  workspaceId: string,
  externalId: string,
  command: () => Promise<T>,
): Promise<{ running: Promise<T> }> {
  const k = holdKey(workspaceId, externalId);
  await k.isHeld;
  const running = command();
  running.catch(() => undefined);
  expect(await settlesWithin(running, 400)).toBe(false);
  k.release();
  await k.done;
  return { running };
}

describe('the external-ID key lock after a remembered guard', () => {
  it('Complete of a task holding an external ID waits for the key, each phase', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { external_id: 'held-key' });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    // Claims and records guard the operation: this process has seen it (with its ID) before Complete.
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);

    const a = await waitsForKey(ws.workspaceId, 'held-key', () => completeTaskCreationPhaseA(t.db, auth));
    expect(await a.running).toBe('completing');
    const b = await waitsForKey(ws.workspaceId, 'held-key', () => completeTaskCreation(t.db, auth));
    expect((await b.running).outcome).toBe('Created');
  });

  it('Abort of a task holding an external ID waits for the key before its predicate', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, {
      external_id: 'abort-key',
      workspace_policy: { mode: 'shared_group', group_id: ws.groupId },
    });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    // Guarded once already (a Complete refused: nothing succeeded yet).
    await expect(completeTaskCreation(t.db, auth)).rejects.toMatchObject({ code: 'creation_state_conflict' });

    // Abort locks the whole chain before it checks its predicate (here: refused, no step failed).
    const abort = await waitsForKey(ws.workspaceId, 'abort-key', () =>
      abortTaskCreation(t.db, auth, 'caller_cancelled'),
    );
    await expect(abort.running).rejects.toMatchObject({ code: 'creation_state_conflict' });
  });

  it('a task without an external ID completes while an unrelated key is held', async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, {});
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    const k = holdKey(ws.workspaceId, 'someone-else');
    await k.isHeld;
    try {
      expect((await completeTaskCreation(t.db, auth)).outcome).toBe('Created');
    } finally {
      k.release();
      await k.done;
    }
  });
});
