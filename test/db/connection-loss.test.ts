/**
 * The transaction runner under connection loss (src/db/tx.ts,
 * src/db/connection-loss.ts), on a real server: the server kills the very
 * connection a transaction runs on (`pg_terminate_backend`, `KILL
 * CONNECTION`), at a chosen point.
 *
 * - Killed before COMMIT: the server rolled the attempt back, the command
 *   restarts on a new connection and commits exactly once.
 * - Killed with COMMIT next: the outcome is unknown to the client, so the
 *   runner answers `commit_outcome_unknown` and does not run the command again.
 * - Killed every time: `database_unavailable` after a bounded number of
 *   attempts, and nothing written.
 * - Plain reads, idempotent autocommit writes and the pool shrug off
 *   connections killed while idle; a one-statement write killed while it
 *   runs answers `commit_outcome_unknown`.
 * - The HTTP mapping: 503 with Retry-After.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RETRY_AFTER_S, toHttpResponse } from '../../src/api/errors';
import { connectionsLost, isConnectionLost } from '../../src/db/connection-loss';
import { execIdempotent, execOnce, readRows, runTransaction, type Tx } from '../../src/db/tx';
import { TaskLedgerError } from '../../src/domain/errors';
import { silentLogger } from '../../src/log';
import { sql, useTestDb } from '../support/db';

const t = useTestDb();
/** Kills through a pool of its own, so it never kills the connection it speaks on. */
const killer = useTestDb(1);
const TABLE = `conn_loss_probe_${process.pid}`;

beforeAll(async () => {
  await sql(t.db, `CREATE TABLE ${TABLE} (id VARCHAR(64) PRIMARY KEY)`);
});
afterAll(async () => {
  await sql(t.db, `DROP TABLE ${TABLE}`);
});

async function ownConnectionId(tx: Tx): Promise<string> {
  const [row] = await tx.rows<{ id: string | number }>(
    tx.dialect === 'postgres' ? 'SELECT pg_backend_pid() AS id' : 'SELECT CONNECTION_ID() AS id',
  );
  return String(row!.id);
}

/** Kills a connection from the server side and waits until the server no longer lists it. */
async function killConnection(id: string): Promise<void> {
  if (t.db.dialect === 'postgres') await sql(killer.db, 'SELECT pg_terminate_backend(CAST(? AS integer))', [id]);
  else await sql(killer.db, `KILL CONNECTION ${Number(id)}`);
  const listed =
    t.db.dialect === 'postgres'
      ? 'SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = CAST(? AS integer)'
      : 'SELECT COUNT(*) AS n FROM information_schema.processlist WHERE id = ?';
  for (let i = 0; i < 200; i++) {
    const [row] = await sql<{ n: number | string }>(killer.db, listed, [id]);
    if (Number(row!.n) === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`connection ${id} was not killed`);
}

async function rowsWithId(id: string): Promise<number> {
  const [row] = await sql<{ n: number | string }>(t.db, `SELECT COUNT(*) AS n FROM ${TABLE} WHERE id = ?`, [id]);
  return Number(row!.n);
}

/**
 * Inserts `id` in a transaction whose own connection is killed on every run, right after the insert; the
 * transaction's next step is then COMMIT (`'commit'`) or one more statement (`'statement'`).
 */
async function insertKillingEveryRun(
  id: string,
  next: 'commit' | 'statement',
): Promise<{ err: unknown; runs: number }> {
  let runs = 0;
  const err = await runTransaction(t.db, 'ProbeInsert', async (tx) => {
    runs++;
    const own = await ownConnectionId(tx);
    await tx.exec(`INSERT INTO ${TABLE} (id) VALUES (?)`, [id]);
    await killConnection(own);
    if (next === 'statement') await tx.rows('SELECT 1 AS one');
  }).then(
    () => null,
    (e: unknown) => e,
  );
  return { err, runs };
}

describe('a transaction whose connection the server kills', () => {
  it('restarts on a new connection when killed before COMMIT, and commits exactly once', async () => {
    const id = `before-commit-${Date.now()}`;
    const lostBefore = connectionsLost();
    const connections: string[] = [];
    const result = await runTransaction(t.db, 'ProbeInsert', async (tx) => {
      connections.push(await ownConnectionId(tx));
      await tx.exec(`INSERT INTO ${TABLE} (id) VALUES (?)`, [id]);
      if (connections.length === 1) {
        await killConnection(connections[0]!);
        // The next statement finds the connection gone; the server rolled the insert back.
        await tx.rows('SELECT 1 AS one');
      }
      return connections.length;
    });
    expect(result).toBe(2);
    expect(connections[1]).not.toBe(connections[0]);
    expect(await rowsWithId(id)).toBe(1);
    expect(connectionsLost()).toBeGreaterThan(lostBefore);
  });

  it('answers commit_outcome_unknown when the connection dies with COMMIT next, and does not run again', async () => {
    const id = `at-commit-${Date.now()}`;
    const { err, runs } = await insertKillingEveryRun(id, 'commit');
    expect(err).toBeInstanceOf(TaskLedgerError);
    expect((err as TaskLedgerError).code).toBe('commit_outcome_unknown');
    expect(runs).toBe(1);
    // Here the server had rolled back before COMMIT arrived; the client could not know that.
    expect(await rowsWithId(id)).toBe(0);
  });

  it('gives up with database_unavailable after a bounded number of lost connections, having written nothing', async () => {
    const id = `always-killed-${Date.now()}`;
    const { err, runs } = await insertKillingEveryRun(id, 'statement');
    expect((err as TaskLedgerError).code).toBe('database_unavailable');
    expect(runs).toBeGreaterThan(2);
    expect(runs).toBeLessThanOrEqual(10);
    expect(await rowsWithId(id)).toBe(0);
  });

  it('keeps plain reads and new transactions working after every pooled connection was killed while idle', async () => {
    // Fill the pool with idle connections, remember them, kill them all.
    const ids = await Promise.all(
      Array.from({ length: 4 }, () =>
        runTransaction(t.db, 'ProbeConnection', async (tx) => {
          const own = await ownConnectionId(tx);
          await new Promise((r) => setTimeout(r, 50));
          return own;
        }),
      ),
    );
    for (const id of new Set(ids)) await killConnection(id);
    const reads = await Promise.all(
      Array.from({ length: 6 }, () => readRows<{ one: number }>(t.db, 'SELECT 1 AS one')),
    );
    for (const [row] of reads) expect(Number(row!.one)).toBe(1);
    const id = `after-idle-kill-${Date.now()}`;
    await runTransaction(t.db, 'ProbeInsert', (tx) => tx.exec(`INSERT INTO ${TABLE} (id) VALUES (?)`, [id]));
    expect(await rowsWithId(id)).toBe(1);
  });

  it('runs an idempotent autocommit write on a fresh connection after the pooled ones were killed', async () => {
    const ids = await Promise.all(
      Array.from({ length: 4 }, () => runTransaction(t.db, 'ProbeConnection', (tx) => ownConnectionId(tx))),
    );
    const id = `idem-${Date.now()}`;
    await sql(t.db, `INSERT INTO ${TABLE} (id) VALUES (?)`, [id]);
    for (const c of new Set(ids)) await killConnection(c);
    // A compare-and-set: it changes the row it names, and nothing when the row is not in the expected state.
    expect(await execIdempotent(t.db, `UPDATE ${TABLE} SET id = ? WHERE id = ?`, [`${id}-renewed`, id])).toBe(1);
    expect(await execIdempotent(t.db, `UPDATE ${TABLE} SET id = ? WHERE id = ?`, [`${id}-renewed`, id])).toBe(0);
    // Reads take whatever dead connection the pool may still hand out (as in the test above) before the checks.
    await Promise.all(Array.from({ length: 6 }, () => readRows(t.db, 'SELECT 1 AS one')));
    expect(await rowsWithId(`${id}-renewed`)).toBe(1);
    expect(await rowsWithId(id)).toBe(0);
  });
});

describe('a one-statement write whose connection dies while it runs', () => {
  it('answers commit_outcome_unknown (execOnce) and is not run again', async () => {
    const id = `once-${Date.now()}`;
    await sql(t.db, `INSERT INTO ${TABLE} (id) VALUES (?)`, [id]);
    const marker = `kill-me-${id}`;
    const sleep = t.db.dialect === 'postgres' ? '(SELECT pg_sleep(2)) IS NOT NULL' : 'SLEEP(2) = 0';
    const write = execOnce(t.db, 'ProbeOnce', `UPDATE ${TABLE} SET id = ? WHERE id = ? AND ${sleep} /* ${marker} */`, [
      `${id}-x`,
      id,
    ]);
    write.catch(() => undefined);
    // Find the backend running it (by the marker in its text) and kill it mid-statement.
    const running =
      t.db.dialect === 'postgres'
        ? "SELECT pid AS id FROM pg_stat_activity WHERE query LIKE ? AND query NOT LIKE '%pg_stat_activity%'"
        : "SELECT id FROM information_schema.processlist WHERE info LIKE ? AND info NOT LIKE '%processlist%'";
    let victim: string | undefined;
    for (let i = 0; i < 100 && victim === undefined; i++) {
      const [row] = await sql<{ id: string | number }>(killer.db, running, [`%${marker}%`]);
      if (row) victim = String(row.id);
      else await new Promise((r) => setTimeout(r, 10));
    }
    expect(victim).toBeDefined();
    await killConnection(victim!);
    await expect(write).rejects.toMatchObject({ code: 'commit_outcome_unknown' });
    // Killed before its sleep ended: it did not take effect, and nothing ran it again.
    expect(await rowsWithId(id)).toBe(1);
    expect(await rowsWithId(`${id}-x`)).toBe(0);
  });
});

describe('what a lost connection means to callers', () => {
  it('recognises both drivers’ connection errors and nothing else', () => {
    expect(isConnectionLost({ driverError: { code: '57P01' } })).toBe(true);
    expect(isConnectionLost(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isConnectionLost({ code: 'PROTOCOL_CONNECTION_LOST' })).toBe(true);
    expect(isConnectionLost({ errno: 1927 })).toBe(true);
    expect(isConnectionLost({ driverError: { code: '40P01' } })).toBe(false);
    expect(isConnectionLost({ errno: 1062 })).toBe(false);
    expect(isConnectionLost(new Error('duplicate key'))).toBe(false);
  });

  it('maps database_unavailable and commit_outcome_unknown to 503, and so a raw driver loss', () => {
    const log = silentLogger();
    for (const code of ['database_unavailable', 'commit_outcome_unknown'] as const) {
      const res = toHttpResponse(new TaskLedgerError(code, 'x'), log);
      expect(res.status).toBe(503);
      expect(res.body.error).toBe(code);
    }
    expect(toHttpResponse({ code: 'ECONNRESET', message: 'read ECONNRESET' }, log).status).toBe(503);
    expect(RETRY_AFTER_S).toBeGreaterThan(0);
  });
});
