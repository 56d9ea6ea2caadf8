/**
 * A batch stops at its first failing statement, on one connection that goes
 * on serving (src/db/batch.ts; on PostgreSQL one extended-protocol pipeline,
 * src/db/pg-pipeline.ts, ADR 0053; on MySQL one multi-statement text). A
 * sequence's value is not transactional, so it shows whether a statement
 * after the failure ran: it must not have. The pool holds one connection, so
 * every batch after the failure runs where the failure was, prepared
 * statements and all. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { runTransaction } from '../../src/db/tx';
import { insertWorkspace, sql, useTestDb } from '../support/db';

const t = useTestDb(1);
const SEQ = 'batch_pipeline_probe';

const nextSql = () => (t.db.dialect === 'postgres' ? `SELECT nextval('${SEQ}') AS v` : `SELECT NEXTVAL(${SEQ}) AS v`);

async function nextValue(): Promise<number> {
  const rows = await runTransaction(t.db, 'ProbeNext', (tx) => tx.rows<{ v: number | string }>(nextSql()));
  return Number(rows[0]!.v);
}

beforeAll(async () => {
  await sql(t.db, `CREATE SEQUENCE IF NOT EXISTS ${SEQ}`);
});

describe('a batch stops at its first failing statement', () => {
  it('runs nothing after the failure, rolls back what ran before it, and the connection serves the next batch', async () => {
    // Twice first, so the statements below run prepared (a statement is prepared from its second sighting).
    for (let i = 0; i < 2; i++) {
      const id = randomUUID();
      await runTransaction(t.db, 'ProbeWarm', async (tx) => {
        await Promise.all([insertWorkspace(tx, id, 'warm'), tx.rows(nextSql())]);
      });
    }
    for (let round = 0; round < 3; round++) {
      const before = await nextValue();
      const first = randomUUID();
      const dup = randomUUID();
      await expect(
        runTransaction(t.db, 'ProbeFailure', (tx) =>
          Promise.all([
            insertWorkspace(tx, first, 'one'),
            insertWorkspace(tx, dup, 'two'),
            insertWorkspace(tx, dup, 'again'),
            tx.rows(nextSql()),
          ]),
        ),
      ).rejects.toThrow();
      // The sequence moved once, by the probe below: the NEXTVAL after the duplicate never ran.
      expect(await nextValue()).toBe(before + 1);
      const rows = await sql<{ id: string }>(t.db, 'SELECT id FROM workspaces WHERE id IN (?, ?)', [first, dup]);
      expect(rows).toEqual([]);
      // The same connection runs the next batch, with its answers in order.
      const ok = randomUUID();
      const answered = await runTransaction(t.db, 'ProbeAfter', async (tx) => {
        const [, read] = await Promise.all([
          insertWorkspace(tx, ok, `after ${round}`),
          tx.rows<{ name: string }>('SELECT name FROM workspaces WHERE id = ?', [ok]),
        ]);
        return read;
      });
      expect(answered.map((r) => r.name)).toEqual([`after ${round}`]);
    }
  });
});
