/**
 * The global lock order: the LockPlan refuses inversions (pure), a real
 * transaction that tries one throws and writes nothing, key locks exclude on
 * both dialects, and deadlocks restart the whole command.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { LockOrderError } from '../../src/domain/errors';
import { LockPlan, TIER } from '../../src/db/lock-plan';
import { runTransaction } from '../../src/db/tx';
import { externalIdKeyDigest } from '../../src/store/lock-keys';
import { count, sql, useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { countRoundTrips } from '../support/round-trips';

const t = useTestDb();

describe('LockPlan', () => {
  it('accepts ascending tiers and ascending keys within a tier', () => {
    const plan = new LockPlan();
    plan.acquire(TIER.WORKSPACE, 'workspaces:a');
    plan.acquire(TIER.WORKSPACE, 'workspaces:b');
    plan.acquire(TIER.AUTHORITY, 'api_tokens:z');
    plan.acquire(TIER.OPERATION, 'op:1');
    plan.acquire(TIER.EXTERNAL_ID_KEY, 'key:ff');
    plan.acquire(TIER.TASK, 'tasks:0');
    plan.acquire(TIER.STEP, 'steps:1');
    plan.acquire(TIER.OUTBOX, 'event:1');
    expect(plan.acquisitions()).toHaveLength(8);
  });

  it('says, without acquiring, whether a lock could still be taken in order', () => {
    const plan = new LockPlan();
    plan.acquire(TIER.OPERATION, 'b');
    plan.acquire(TIER.SESSION, 'm');
    expect(plan.accepts(TIER.OPERATION, 'b')).toBe(true); // held
    expect(plan.accepts(TIER.OPERATION, 'c')).toBe(false); // a lower tier than one held
    expect(plan.accepts(TIER.SESSION, 'a')).toBe(false); // same tier, a lower key
    expect(plan.accepts(TIER.SESSION, 'z')).toBe(true);
    expect(plan.accepts(TIER.ENVIRONMENT, 'a')).toBe(true);
    // Nothing was recorded by asking: the lower key of the held tier is still refused, the higher one taken.
    expect(() => plan.acquire(TIER.SESSION, 'a')).toThrow(LockOrderError);
    expect(plan.acquire(TIER.SESSION, 'n')).toBe('new');
  });

  it('treats a re-acquisition of a held key as a no-op, even after higher tiers', () => {
    const plan = new LockPlan();
    plan.acquire(TIER.WORKSPACE, 'workspaces:a');
    plan.acquire(TIER.STEP, 'steps:1');
    expect(plan.acquire(TIER.WORKSPACE, 'workspaces:a')).toBe('held');
  });

  it.each([
    [
      'a lower tier after a higher one',
      [
        [TIER.TASK, 't'],
        [TIER.OPERATION, 'o'],
      ],
    ],
    [
      'workspace after step',
      [
        [TIER.STEP, 's'],
        [TIER.WORKSPACE, 'w'],
      ],
    ],
    [
      'task rows before the external-ID key',
      [
        [TIER.TASK, 't'],
        [TIER.EXTERNAL_ID_KEY, 'k'],
      ],
    ],
    [
      'a smaller key after a larger one in a tier',
      [
        [TIER.WORKSPACE, 'workspaces:b'],
        [TIER.WORKSPACE, 'workspaces:a'],
      ],
    ],
    [
      'outbox then cleanup',
      [
        [TIER.OUTBOX, 'e'],
        [TIER.CLEANUP, 'c'],
      ],
    ],
  ] as [string, [number, string][]][])('throws on %s', (_name, seq) => {
    const plan = new LockPlan();
    const [first, second] = seq;
    plan.acquire(first![0] as never, first![1]);
    expect(() => plan.acquire(second![0] as never, second![1])).toThrow(LockOrderError);
  });
});

describe('transactions', () => {
  it('a lock taken out of tier order throws and rolls back what the command wrote', async () => {
    const ws = await seedWorkspace(t.db);
    const err = await runTransaction(t.db, 'inverted', async (tx) => {
      tx.lockRow(TIER.TASK, 'tasks', randomUUID());
      await tx.exec("UPDATE workspaces SET name = 'renamed' WHERE id = ?", [ws.workspaceId]);
      tx.lockRow(TIER.WORKSPACE, 'workspaces', ws.workspaceId);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockOrderError);
    expect((err as LockOrderError).code).toBe('lock_order_violation');
    const [row] = await sql<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ?', [ws.workspaceId]);
    expect(row!.name).not.toBe('renamed');
  });

  /** Two transactions lock one key: the second runs only once the first committed. */
  async function excludes(digest: Buffer): Promise<string[]> {
    const order: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let acquired!: () => void;
    const firstHolds = new Promise<void>((r) => (acquired = r));
    const first = runTransaction(t.db, 'first', async (tx) => {
      await tx.lockKey(TIER.EXTERNAL_ID_KEY, digest);
      order.push('first-locked');
      acquired();
      await held;
      order.push('first-done');
    });
    await firstHolds;
    const second = runTransaction(t.db, 'second', async (tx) => {
      await tx.lockKey(TIER.EXTERNAL_ID_KEY, digest);
      order.push('second-locked');
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(order).toEqual(['first-locked']);
    release();
    await Promise.all([first, second]);
    return order;
  }

  it('an identity-key lock excludes a second transaction until the first commits: a new key, and one seen before', async () => {
    const ws = await seedWorkspace(t.db);
    const digest = externalIdKeyDigest(ws.workspaceId, 'locked-key');
    // The first time (MySQL: the key's row is inserted by the first), then again (its row exists).
    expect(await excludes(digest)).toEqual(['first-locked', 'first-done', 'second-locked']);
    expect(await excludes(digest)).toEqual(['first-locked', 'first-done', 'second-locked']);
  });

  it('an identity-key lock is one statement, sent with what is issued beside it', async () => {
    const ws = await seedWorkspace(t.db);
    for (const name of ['one-statement-key', 'one-statement-key']) {
      await runTransaction(t.db, 'oneStatementKey', async (tx) => {
        await tx.rows('SELECT 1 AS one');
        const trips = countRoundTrips(t.db);
        await Promise.all([
          tx.lockKey(TIER.EXTERNAL_ID_KEY, externalIdKeyDigest(ws.workspaceId, name)),
          tx.rows('SELECT id FROM workspaces WHERE id = ?', [ws.workspaceId]),
        ]);
        expect(trips.calls).toBe(1);
        vi.restoreAllMocks();
      });
    }
  });

  it('restarts the whole command on a deadlock, and both commands commit', async () => {
    const a = await seedWorkspace(t.db);
    const b = await seedWorkspace(t.db);
    let retries = 0;
    let barrier!: () => void;
    const bothLocked = new Promise<void>((r) => (barrier = r));
    let locked = 0;
    // Two commands take the same two rows in opposite order (bypassing the
    // LockPlan on purpose) to force a real deadlock on first attempt.
    const run = (first: string, second: string, label: string) =>
      runTransaction(
        t.db,
        label,
        async (tx) => {
          await tx.rows('SELECT id FROM workspaces WHERE id = ? FOR UPDATE', [first]);
          if (++locked === 2) barrier();
          await Promise.race([bothLocked, new Promise((r) => setTimeout(r, 2000))]);
          await tx.rows('SELECT id FROM workspaces WHERE id = ? FOR UPDATE', [second]);
          await tx.exec('UPDATE workspaces SET name = ? WHERE id = ?', [label, second]);
        },
        { onRetry: () => retries++ },
      );
    await Promise.all([run(a.workspaceId, b.workspaceId, 'x'), run(b.workspaceId, a.workspaceId, 'y')]);
    expect(retries).toBeGreaterThanOrEqual(1);
    expect(await count(t.db, 'workspaces', "id IN (?, ?) AND name IN ('x', 'y')", [a.workspaceId, b.workspaceId])).toBe(
      2,
    );
  });
});
