/**
 * Effect-row locks: needs given in any order are taken in the global order
 * (tier, then table:key), duplicates collapse to the stronger mode, held keys
 * run no SQL, and a need below a tier already held is refused by the
 * LockPlan inside a real transaction. Runs on PostgreSQL and MySQL/MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { TIER } from '../../src/db/lock-plan';
import { runTransaction } from '../../src/db/tx';
import { orderLocks, takeLocks, type LockNeed } from '../../src/store/effects/row-locks';
import { useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();

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
});
