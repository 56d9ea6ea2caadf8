/**
 * Effect-row locks: needs given in any order are taken in the global order
 * (tier, then table:key), duplicates collapse to the stronger mode, held keys
 * run no SQL, and a need below a tier already held is refused by the
 * LockPlan inside a real transaction; a need that names the columns read
 * next is taken by a locking read whose answer answers that read (and any
 * repeat of it) with no statement of its own, unless a write of the
 * transaction came in between
 * (ADR 0032). Runs on PostgreSQL and MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { TIER } from '../../src/db/lock-plan';
import { runTransaction } from '../../src/db/tx';
import { orderLocks, rowRead, takeLocks, type LockNeed } from '../../src/store/effects/row-locks';
import { ENVIRONMENT_COLUMNS } from '../../src/store/effects/row-documents';
import { useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const need = (tier: LockNeed['tier'], table: string, key: string, mode: LockNeed['mode'] = 'share'): LockNeed => ({
  tier,
  table,
  key,
  where: table === 'task_resource_markers' ? 'resource_key = ?' : 'id = ?',
  params: [key],
  mode,
});

describe('effect-row locks', () => {
  it('orders by tier then table:key and keeps the exclusive mode of a duplicate', () => {
    const ordered = orderLocks([
      need(TIER.MARKER, 'task_resource_markers', 'b'),
      need(TIER.ENVIRONMENT, 'task_environments', 'z'),
      need(TIER.MARKER, 'task_resource_markers', 'a'),
      need(TIER.ENVIRONMENT, 'task_environment_bindings', 'z'),
      need(TIER.MARKER, 'task_resource_markers', 'a', 'update'),
    ]);
    expect(ordered.map((n) => `${n.tier}|${n.table}:${n.key}|${n.mode}`)).toEqual([
      '11.1|task_environment_bindings:z|share',
      '11.1|task_environments:z|share',
      '14|task_resource_markers:a|update',
      '14|task_resource_markers:b|share',
    ]);
  });

  it('takes shuffled needs in a real transaction in global order; held keys are no-ops', async () => {
    const ws = await seedWorkspace(t.db);
    const trail = await runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [
        need(TIER.MARKER, 'task_resource_markers', randomUUID()),
        need(TIER.ENVIRONMENT, 'task_environments', ws.sharedEnvironmentId),
        need(TIER.SESSION, 'task_sessions', randomUUID(), 'update'),
      ]);
      await takeLocks(tx, [need(TIER.ENVIRONMENT, 'task_environments', ws.sharedEnvironmentId)]);
      return tx.locks.acquisitions();
    });
    expect(trail.map((k) => k.split('|')[0])).toEqual(['9', '11.1', '14']);
  });

  it('refuses a need below a tier already held (lock_order_violation), writing nothing', async () => {
    const ws = await seedWorkspace(t.db);
    const run = runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [need(TIER.MARKER, 'task_resource_markers', randomUUID())]);
      await takeLocks(tx, [need(TIER.ENVIRONMENT, 'task_environments', ws.sharedEnvironmentId)]);
    });
    await expect(run).rejects.toMatchObject({ code: 'lock_order_violation' });
  });

  it('a need that names what is read next answers those reads from its own locking read, in its round trip', async () => {
    const ws = await seedWorkspace(t.db);
    const envRead = rowRead('task_environments', ENVIRONMENT_COLUMNS, 'id = ?');
    const trips = countRoundTrips(t.db, ws.sharedEnvironmentId);
    const [row, calls] = await runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [
        { ...need(TIER.ENVIRONMENT, 'task_environments', ws.sharedEnvironmentId), reads: ENVIRONMENT_COLUMNS },
      ]);
      const rows = await tx.rows<{ id: string; kind: string }>(envRead, [ws.sharedEnvironmentId]);
      // Read again (a second verifier of the same row): answered from the lock too, as no write came in between.
      const again = await tx.rows<{ id: string; kind: string }>(envRead, [ws.sharedEnvironmentId]);
      expect(again).toEqual(rows);
      return [rows[0], trips.calls] as const;
    });
    // The plain read sent nothing: the lock's round trip answered it.
    expect(calls).toBe(1);
    expect(row).toMatchObject({ id: ws.sharedEnvironmentId, kind: 'shared' });
  });

  it('a write of the transaction to the table between the lock and the read sends the read, which sees it', async () => {
    const ws = await seedWorkspace(t.db);
    const groupRead = rowRead('workspace_groups', 'id, name', 'id = ?');
    const group = { ...need(TIER.GROUP, 'workspace_groups', ws.groupId), reads: 'id, name' };
    const trips = countRoundTrips(t.db, ws.groupId);
    const names = await runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [group]);
      // Any write naming the table drops the kept answer: awaited...
      await tx.exec('UPDATE workspace_groups SET name = ? WHERE id = ?', ['renamed once', ws.groupId]);
      const first = await tx.rows<{ name: string }>(groupRead, [ws.groupId]);
      tx.rollbackOnly();
      return [first[0]?.name];
    });
    expect(names).toEqual(['renamed once']);
    // The lock, the write, and the read of its own.
    expect(trips.calls).toBe(3);

    const checked = await runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [group]);
      // ...or sent without waiting (a compare-and-set checked before COMMIT).
      tx.expect(
        { sql: 'UPDATE workspace_groups SET name = ? WHERE id = ?', params: ['renamed twice', ws.groupId] },
        1,
        () => new Error('not renamed'),
      );
      const read = await tx.rows<{ name: string }>(groupRead, [ws.groupId]);
      tx.rollbackOnly();
      return read[0]?.name;
    });
    expect(checked).toBe('renamed twice');
  });

  it('two needs of one row keep the stronger mode and what either reads next', () => {
    const id = randomUUID();
    const [merged] = orderLocks([
      { ...need(TIER.SESSION, 'task_sessions', id), reads: 'id, state' },
      need(TIER.SESSION, 'task_sessions', id, 'update'),
    ]);
    expect(merged).toMatchObject({ mode: 'update', reads: 'id, state' });
    const [other] = orderLocks([
      need(TIER.SESSION, 'task_sessions', id),
      { ...need(TIER.SESSION, 'task_sessions', id), reads: 'id' },
    ]);
    expect(other).toMatchObject({ mode: 'share', reads: 'id' });
  });

  it('a read sent early that a lock already reads is not sent again', async () => {
    const ws = await seedWorkspace(t.db);
    const groupRead = rowRead('workspace_groups', 'id, name', 'id = ?');
    const trips = countRoundTrips(t.db, ws.groupId);
    const name = await runTransaction(t.db, 'test', async (tx) => {
      const locked = takeLocks(tx, [{ ...need(TIER.GROUP, 'workspace_groups', ws.groupId), reads: 'id, name' }]);
      tx.readEarly([{ sql: groupRead, params: [ws.groupId] }]);
      await locked;
      return (await tx.rows<{ name: string }>(groupRead, [ws.groupId]))[0]?.name;
    });
    expect(name).toBeTypeOf('string');
    expect(trips.calls).toBe(1);
    // One statement names the group (PostgreSQL may send it prepared: its value, not its SQL): the lock.
    expect(trips.texts.join('\n').split(ws.groupId)).toHaveLength(2);
  });

  it('a need without it locks with a bare SELECT and leaves the read to the server', async () => {
    const ws = await seedWorkspace(t.db);
    const envRead = rowRead('task_environments', ENVIRONMENT_COLUMNS, 'id = ?');
    const trips = countRoundTrips(t.db, ws.sharedEnvironmentId);
    await runTransaction(t.db, 'test', async (tx) => {
      await takeLocks(tx, [need(TIER.ENVIRONMENT, 'task_environments', ws.sharedEnvironmentId)]);
      await tx.rows(envRead, [ws.sharedEnvironmentId]);
    });
    expect(trips.calls).toBe(2);
  });
});
