/**
 * The bench's CPU accounting counts the measured dialect's database server
 * only: with PostgreSQL and MariaDB both running on the machine, the other
 * server (idle, or still flushing an earlier run's writes) is "other", not
 * this run's database. Both dialects: each run finds its own server's
 * processes, and the one serving this test's connection among them.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { databaseProcessNames, pidsNamed, snapshotCpu, trackCpu } from '../../src/bench/cpu';
import { sql, useTestDb } from '../support/db';

/** A process's command name, or null once it has exited: other test files' backends come and go meanwhile. */
const commOf = (pid: number): string | null => {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
};

/** The command names of those of `pids` still running. */
const liveComms = (pids: readonly number[]): string[] => pids.map(commOf).filter((c): c is string => c !== null);

describe('bench CPU accounting by dialect', () => {
  const t = useTestDb(1);

  it("counts this dialect's server processes and no other server's", async () => {
    const dialect = t.db.dialect;
    const own = dialect === 'postgres' ? ['postgres'] : ['mariadbd', 'mysqld'];
    const other = dialect === 'postgres' ? ['mariadbd', 'mysqld'] : ['postgres'];
    expect(databaseProcessNames(dialect)).toEqual(own);
    // Both servers run on this machine (CI starts both): the other one is there to be left out.
    expect(pidsNamed(other).length).toBeGreaterThan(0);

    const snap = snapshotCpu([], dialect);
    expect(snap.database.length).toBeGreaterThan(0);
    for (const comm of liveComms(snap.database)) expect(own).toContain(comm);
    for (const pid of pidsNamed(other)) expect(snap.database).not.toContain(pid);

    // The process serving this test's own connection is among them.
    const server =
      dialect === 'postgres'
        ? Number((await sql<{ pid: number }>(t.db, 'SELECT pg_backend_pid() AS pid'))[0]!.pid)
        : pidsNamed(own)[0]!;
    expect(snap.database).toContain(server);

    const tracker = trackCpu([], { dialect, everyMs: 20 });
    await new Promise((r) => setTimeout(r, 60));
    const after = tracker.finish();
    for (const comm of liveComms(after.database)) expect(own).toContain(comm);
  });

  it('without a dialect, every database server counts', () => {
    expect(databaseProcessNames()).toEqual(['postgres', 'mariadbd', 'mysqld']);
    const snap = snapshotCpu([]);
    const all = pidsNamed(['postgres', 'mariadbd', 'mysqld']);
    for (const pid of all) expect(snap.database).toContain(pid);
  });
});
