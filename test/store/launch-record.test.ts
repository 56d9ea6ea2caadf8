/**
 * The launch record (store/launch-record.ts, ADR 0029) against the real
 * database, both dialects: with what its claim verified it commits in one
 * round trip — both claims (the launch's own and phase B's) keep it; a check
 * the server makes that fails starts over on the checked path, which gives
 * the refusal with zero writes or, where nothing is wrong, records; a retry
 * after a COMMIT that took but whose answer was lost finds the record and
 * writes nothing (and a refusal without a lost connection is not taken for
 * one);
 * a connection killed during the round trip is retried and records once.
 */
import mysql from 'mysql2';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { completeTaskCreation } from '../../src/store/complete';
import type { DispatchClaim, RuntimeProof } from '../../src/store/launch-dispatch';
import { recordLaunchDispatch } from '../../src/store/launch-record';
import type { OperationAuthority } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { begin, driveAllSteps } from '../support/ledger';
import { countRoundTrips, sentStatements } from '../support/round-trips';
import { claimedLaunch } from '../support/launch';
import { killWhileInserting } from '../support/db-faults';
import { seedWorkspace } from '../support/seed';

const t = useTestDb();
const OWNER = 'record-test:worker';
const LEASE_MS = 60_000;

afterEach(() => {
  vi.restoreAllMocks();
});

/** A created task whose launch intent is armed, and the claim `claimLaunchDispatch` took for it. */
const claimed = () => claimedLaunch(t.db, OWNER, LEASE_MS);

const proof = (pid: number): RuntimeProof => ({
  pid,
  handle: { kind: 'local', pid, start_marker: `/tmp/marker-${pid}` },
  startMarkerSha256: 'a'.repeat(64),
});

async function recorded(claim: DispatchClaim) {
  const [row] = await sql<{ state: string; evidence_sha256: string | null }>(
    t.db,
    'SELECT state, evidence_sha256 FROM task_launch_dispatch_claims WHERE id = ?',
    [claim.dispatchId],
  );
  const [session] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_sessions WHERE id = ?', [
    claim.sessionId,
  ]);
  return {
    claim: row?.state,
    evidence: row?.evidence_sha256 ?? null,
    session: session?.state,
    runtimes: await count(t.db, 'executors_running', 'dispatch_claim_id = ?', [claim.dispatchId]),
  };
}

/**
 * Fault injection on the client side (the real database runs every statement): the first round trip that names
 * `marker` runs on the server, then its connection is destroyed and the caller gets a connection reset instead of
 * the answer — a COMMIT that took with its answer lost.
 */
function loseAnswerOf(marker: string): void {
  const reset = () => Object.assign(new Error('connection reset (test)'), { code: 'ECONNRESET' });
  let done = false;
  if (t.db.dialect === 'postgres') {
    const client = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = client.query;
    vi.spyOn(client, 'query').mockImplementation(function (this: unknown, ...args: unknown[]) {
      const text = typeof args[0] === 'string' ? args[0] : '';
      const result = original.apply(this, args);
      // Prepared statements run as EXECUTE: the marker is a value; COMMIT ends the record's round trip.
      if (done || !text.includes(marker) || !text.includes('COMMIT')) return result;
      done = true;
      return Promise.resolve(result).then(() => {
        (this as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
        throw reset();
      });
    });
    return;
  }
  const proto = mysql.Connection.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  vi.spyOn(proto, 'query').mockImplementation(function (this: { destroy(): void }, ...args: unknown[]) {
    const text = String(args[0]) + (Array.isArray(args[1]) ? (args[1] as unknown[]).join(' ') : '');
    const callback = args[args.length - 1];
    if (done || typeof callback !== 'function' || !text.includes(marker) || !text.includes('executors_running')) {
      return original.apply(this, args);
    }
    done = true;
    const wrapped = (err: unknown) => {
      this.destroy();
      (callback as (e: unknown) => void)(err ?? reset());
    };
    return original.apply(this, [...args.slice(0, -1), wrapped]);
  });
}

/** Every column name the database's answers carry from now on (undo with `vi.restoreAllMocks()`). */
function answeredColumns(dialect: 'postgres' | 'mysql'): string[] {
  const names: string[] = [];
  const fieldsOf = (fields: unknown) => {
    for (const f of (Array.isArray(fields) ? fields : []).flat() as { name?: string }[])
      if (f?.name) names.push(f.name);
  };
  if (dialect === 'postgres') {
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    vi.spyOn(proto, 'query').mockImplementation(function (this: unknown, ...args: unknown[]) {
      const out = original.apply(this, args);
      if (out instanceof Promise) {
        void out.then(
          (res: unknown) => {
            for (const r of Array.isArray(res) ? res : [res]) fieldsOf((r as { fields?: unknown })?.fields);
          },
          () => undefined,
        );
      }
      return out;
    });
  } else {
    const proto = mysql.Connection.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    vi.spyOn(proto, 'query').mockImplementation(function (this: unknown, ...args: unknown[]) {
      const at = args.findIndex((a) => typeof a === 'function');
      if (at >= 0) {
        const callback = args[at] as (...a: unknown[]) => unknown;
        args[at] = (err: unknown, rows: unknown, fields: unknown) => {
          fieldsOf(fields);
          return callback(err, rows, fields);
        };
      }
      return original.apply(this, args);
    });
  }
  return names;
}

/** The same claim, remembering another intent generation than the one stored: the server's check fails. */
const misremembered = (claim: DispatchClaim): DispatchClaim => ({
  ...claim,
  verified: { ...claim.verified!, intent: { ...claim.verified!.intent, generation: 999 } },
});

describe('the launch record (ADR 0029)', () => {
  it('commits in one round trip with what its claim verified', async () => {
    const { claim } = await claimed();
    expect(claim.verified?.stepIds.length).toBeGreaterThan(0);
    const trips = countRoundTrips(t.db);
    await recordLaunchDispatch(t.db, claim, proof(4242));
    expect(trips.calls).toBe(1);
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
  });

  it("sends the claim's compare-and-set before its last, lock-free check: on MySQL its row-count check rides there (ADR 0047)", async () => {
    const { claim } = await claimed();
    const sent = sentStatements(t.db);
    await recordLaunchDispatch(t.db, claim, proof(4247));
    const texts = [...sent];
    vi.restoreAllMocks();
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
    const at = (re: RegExp) => texts.findIndex((x) => re.test(x));
    const steps = at(/FROM task_creation_steps/);
    const cas = at(/UPDATE task_launch_dispatch_claims SET state/);
    const revision = at(/FROM task_revisions r/);
    expect([steps, cas, revision].every((i) => i >= 0)).toBe(true);
    expect(steps).toBeLessThan(cas);
    if (t.db.dialect === 'mysql') {
      // The write, then the check that answers for it and the revision's own, in one statement; no statement of its own.
      expect(revision).toBe(cas + 1);
      expect(texts[revision]).toMatch(
        /ROW_COUNT\(\) <> 1\) AS written, [\s\S]*FROM \(SELECT r\.event_id FROM task_revisions r/,
      );
      expect(texts.filter((x) => /^SELECT ~0 \+ \([^)]*ROW_COUNT\(\)[^)]*\) AS ok$/.test(x))).toEqual([]);
    } else {
      expect(cas).toBeLessThan(revision);
    }
  });

  it('locks the steps without reading their documents back (the fence counts rows, ADR 0042)', async () => {
    const { claim } = await claimed();
    const columns = answeredColumns(t.db.dialect);
    await recordLaunchDispatch(t.db, claim, proof(4243));
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
    expect(columns.length).toBeGreaterThan(0);
    expect(columns.filter((c) => c === 'request_json' || c === 'evidence_json')).toEqual([]);
  });

  it("keeps what phase B's own claim verified, and records it in one round trip", async () => {
    const ws = await seedWorkspace(t.db);
    const res = await begin(t.db, ws, { start_agent: true, agent_profile_id: ws.agentProfileId });
    const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
    await driveAllSteps(t.db, auth, res.operationId, ws.dataDir);
    const done = await completeTaskCreation(t.db, auth, { claimant: { owner: OWNER, leaseMs: LEASE_MS } });
    const claim = await done.launch!;
    expect(claim.verified?.intent.evidenceSha256).toMatch(/^[0-9a-f]{64}$/);
    const trips = countRoundTrips(t.db);
    await recordLaunchDispatch(t.db, claim, proof(4243));
    expect(trips.calls).toBe(1);
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
  });

  it('a check the server makes that fails starts over on the checked path, which records when all is well', async () => {
    const { claim } = await claimed();
    const trips = countRoundTrips(t.db);
    await recordLaunchDispatch(t.db, misremembered(claim), proof(4244));
    expect(trips.calls).toBeGreaterThan(1);
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
  });

  it('a task deleted or an intent whose evidence changed since the claim: the refusal, zero writes', async () => {
    for (const [tamper, code] of [
      ["UPDATE tasks SET lifecycle_state = 'deleted' WHERE id = ?", 'creation_state_conflict'],
      [
        "UPDATE task_creation_steps SET evidence_sha256 = ? WHERE operation_id = ? AND kind = 'launch_intent'",
        'evidence_mismatch',
      ],
    ] as const) {
      const { claim, operationId } = await claimed();
      const params = tamper.startsWith('UPDATE tasks') ? [claim.taskId] : ['b'.repeat(64), operationId];
      await sql(t.db, tamper, params);
      await expect(recordLaunchDispatch(t.db, claim, proof(4245))).rejects.toMatchObject({ code });
      expect(await recorded(claim)).toEqual({ claim: 'running', evidence: null, session: 'starting', runtimes: 0 });
    }
  });

  it('a stale claim records nothing', async () => {
    const { claim } = await claimed();
    await sql(t.db, 'UPDATE task_launch_dispatch_claims SET lease_owner = ? WHERE id = ?', [
      'someone-else',
      claim.dispatchId,
    ]);
    await expect(recordLaunchDispatch(t.db, claim, proof(4246))).rejects.toMatchObject({ code: 'stale_claim' });
    expect(await recorded(claim)).toEqual({ claim: 'running', evidence: null, session: 'starting', runtimes: 0 });
  });

  it('a COMMIT that took but whose answer was lost: the retry finds the record and writes nothing', async () => {
    const { claim } = await claimed();
    // The record's round trip runs on the server; its answer is then lost with its connection (the server committed).
    loseAnswerOf(claim.dispatchId);
    await recordLaunchDispatch(t.db, claim, proof(4247));
    vi.restoreAllMocks();
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
  });

  it('a refusal after a failed server check is not mistaken for a lost record', async () => {
    const { claim } = await claimed();
    await recordLaunchDispatch(t.db, claim, proof(4248));
    const first = await recorded(claim);
    // A second record of the same claim (its first attempt fails a check: the claim is no longer `running`) is
    // refused on the checked path: no connection was lost, so nothing is taken for a record made earlier.
    await expect(recordLaunchDispatch(t.db, misremembered(claim), proof(4248))).rejects.toMatchObject({
      code: 'stale_claim',
    });
    expect(await recorded(claim)).toEqual(first);
  });

  it('a connection killed during the round trip is retried, and the launch is recorded once', async () => {
    const { claim } = await claimed();
    // The runtime row's insert for this session waits in a trigger, and the record's connection is killed meanwhile.
    const killed = await killWhileInserting(
      t.db,
      'executors_running',
      `NEW.session_id = '${claim.sessionId}'`,
      claim.sessionId,
      () => recordLaunchDispatch(t.db, claim, proof(4249)),
    );
    expect(killed).toBe(1);
    expect(await recorded(claim)).toMatchObject({ claim: 'succeeded', session: 'running', runtimes: 1 });
  });
});
