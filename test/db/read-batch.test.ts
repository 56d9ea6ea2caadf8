/**
 * Reads outside a transaction issued together share one round trip
 * (`readRows`, src/db/coalesce.ts): each caller still gets its own rows, and
 * a read that fails fails only its own caller.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { readRows, runTransaction } from '../../src/db/tx';
import { countRoundTrips } from '../support/round-trips';
import { useTestDb } from '../support/db';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

async function seed(names: string[]): Promise<string[]> {
  const ids = names.map(() => randomUUID());
  await runTransaction(t.db, 'SeedReads', async (tx) => {
    for (const [i, id] of ids.entries()) {
      await tx.exec(
        `INSERT INTO workspaces (id, name, state, created_at, updated_at) VALUES (?, ?, 'active', ${tx.now}, ${tx.now})`,
        [id, names[i]!],
      );
    }
  });
  return ids;
}

const nameOf = (id: string) => readRows<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ?', [id]);

describe('reads issued together', () => {
  it('travel in one round trip and each caller gets its own rows', async () => {
    const ids = await seed(['r1', 'r2', 'r3', 'r4']);
    const trips = countRoundTrips(t.db);
    const rows = await Promise.all([...ids.map(nameOf), nameOf(randomUUID())]);
    // One call; MySQL may first set a fresh connection's session (UTC): never one call per read.
    expect(trips.calls).toBeGreaterThanOrEqual(1);
    expect(trips.calls).toBeLessThanOrEqual(t.db.dialect === 'postgres' ? 1 : 2);
    expect(rows).toEqual([[{ name: 'r1' }], [{ name: 'r2' }], [{ name: 'r3' }], [{ name: 'r4' }], []]);
  });

  it('a read that fails fails only its own caller', async () => {
    const ids = await seed(['ok1', 'ok2']);
    const results = await Promise.allSettled([
      nameOf(ids[0]!),
      readRows(t.db, 'SELECT no_such_column FROM workspaces WHERE id = ?', [ids[0]!]),
      nameOf(ids[1]!),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[0] as PromiseFulfilledResult<unknown>).value).toEqual([{ name: 'ok1' }]);
    expect((results[2] as PromiseFulfilledResult<unknown>).value).toEqual([{ name: 'ok2' }]);
  });

  it('a read awaited alone, or with a value PostgreSQL cannot inline, still answers exactly', async () => {
    const [id] = await seed(['alone']);
    expect(await nameOf(id!)).toEqual([{ name: 'alone' }]);
    const since = new Date(Date.now() - 3_600_000);
    const [byDate, byId] = await Promise.all([
      readRows<{ name: string }>(t.db, 'SELECT name FROM workspaces WHERE id = ? AND created_at > ?', [id!, since]),
      nameOf(id!),
    ]);
    expect(byDate).toEqual([{ name: 'alone' }]);
    expect(byId).toEqual([{ name: 'alone' }]);
  });
});
