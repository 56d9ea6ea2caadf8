/**
 * ClaimAndApplyLedgerSteps (store/ledger-step.ts, ADR 0015): one wake-up of a
 * ledger-only step claims, performs and records every ledger-only step of its
 * operation that is runnable now, and the launch intent once every other step
 * has succeeded — in one transaction, each step with its own claim
 * (generation raised), record and hashed evidence. A failure before COMMIT
 * leaves the whole batch as it was; a step that waits or is not ledger-only
 * stays out. Asked to, the batch that arms the launch intent also commits
 * Complete's phase A (ADR 0016) — and, when phase A's predicate does not
 * hold, commits its steps without it. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { StepKind } from '../../src/domain/vocab';
import { armFailpoint, disarmAll, FailpointError } from '../../src/failpoints';
import { claimAndApplyLedgerSteps, type LedgerKinds } from '../../src/store/ledger-step';
import { completeTaskCreation, completeTaskCreationPhaseB } from '../../src/store/complete';
import { stepFences } from '../../src/store/complete-in-batch';
import { STEP_COLUMNS } from '../../src/store/step-rows';
import type { StepRow } from '../../src/store/types';
import { runTransaction } from '../../src/db/tx';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips, sentStatements } from '../support/round-trips';
import { rewriteOn } from '../support/db-faults';
import { expectTyped, stepRows } from '../support/ledger';
import { createGroupTask, effectSnapshot, expectRecordedInOneClaim, loadStep, LEDGER_KINDS } from './support';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

/**
 * Round trips of a three-step batch with phase A (session, attachment,
 * launch intent; ADR 0015/0016), COMMIT included: guard, step locks, effect
 * locks with the first step's reads and the second step's (sent early, ADR
 * 0026), the first two steps' writes together (each with its read-back,
 * checked before COMMIT, and the next step's claim; then the launch
 * intent's reads), the launch intent's writes with phase A's fences over the
 * step rows as written, its writes and COMMIT (its verification answered
 * from what the batch read: ADR 0030). Each claim and record travels with the
 * statements after it (`Tx.expect`); a round trip more per step would show
 * here. Before phase A's verification was answered from the batch's reads,
 * one more (the step re-read with the verification); before the second
 * step's reads went early, one more than that; before (a claim
 * and a record each waited for its answer) six more than that; before the
 * read-backs were checked later and phase A verified the rows as written,
 * four more.
 */
const ROUND_TRIPS = { postgres: 7, mysql: 7 };

const KINDS = LEDGER_KINDS;

async function setup(body: Record<string, unknown> = {}) {
  const { c } = await createGroupTask(t.db, (ws) =>
    body.attachments === true ? { attachments: ws.attachmentIds } : {},
  );
  const rows = await stepRows(t.db, c.operationId);
  const batch = (kind: StepKind, owner = 'w1', kinds: LedgerKinds = KINDS, phaseA = false) => {
    const row = rows.find((r) => r.kind === kind)!;
    return claimAndApplyLedgerSteps(t.db, c.auth, { kind, stepKey: row.step_key }, owner, 30_000, kinds, { phaseA });
  };
  const run = async (kind: StepKind, owner = 'w1', kinds: LedgerKinds = KINDS) =>
    (await batch(kind, owner, kinds)).results;
  return { c, rows, run, batch, snap: () => effectSnapshot(t.db, c.operationId, c.taskId) };
}

describe('ledger-only steps of one operation in one transaction', () => {
  it('one wake-up runs every ledger-only step, the launch intent last, each claimed and recorded with hashed evidence', async () => {
    const s = await setup();
    const done = await s.run('session_prepare');
    expect(done.map((d) => [d.claim.kind, d.outcome.state])).toEqual([
      ['session_prepare', 'succeeded'],
      ['workspace_attachment', 'succeeded'],
      ['launch_intent', 'armed'],
    ]);
    for (const { claim, outcome } of done) {
      await expectRecordedInOneClaim(t.db, claim, outcome);
    }
    // A duplicate wake-up of any of them finds it finished: a typed conflict and nothing written.
    const after = await s.snap();
    await expectTyped(s.run('workspace_attachment', 'w2'), 'creation_state_conflict');
    expect(await s.snap()).toBe(after);
  });

  it('a failure before COMMIT at the second step leaves the whole batch as it was; the next run does it once', async () => {
    const s = await setup();
    const before = await s.snap();
    armFailpoint(
      'before_ledger_step_commit',
      { kind: 'throw' },
      { times: 1, match: (ctx) => ctx.kind === 'session_prepare' },
    );
    try {
      await expect(s.run('workspace_attachment')).rejects.toBeInstanceOf(FailpointError);
    } finally {
      disarmAll();
    }
    expect(await s.snap()).toBe(before);
    const rows = await stepRows(t.db, s.c.operationId);
    expect(rows.every((r) => r.state === 'planned' && Number(r.generation) === 0)).toBe(true);
    const done = await s.run('workspace_attachment');
    expect(done.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
  });

  // The inserts' read-back is checked before COMMIT, not waited for (Tx.checkLater): the record and the next
  // step's claim and reads travel with it. A row that does not read back as inserted still rolls everything back.
  it.each([
    [
      'task_resource_markers',
      'marker_sha256',
      "'0000000000000000000000000000000000000000000000000000000000000000'",
      'session rows did not read back exactly',
    ],
    ['workspace_group_members', 'role', "'lead'", 'workspace attachment rows did not read back exactly'],
  ])(
    'a %s row that does not read back as inserted rolls the whole batch back',
    async (table, column, value, message) => {
      const s = await setup();
      const before = await s.snap();
      // Scoped to this test's task: the database is shared with the other test files running meanwhile.
      const fault = await rewriteOn(t.db, table, 'INSERT', column, value, `NEW.task_id = '${s.c.taskId}'`);
      try {
        await expect(s.batch('session_prepare', 'w1', KINDS, true)).rejects.toThrow(message);
      } finally {
        await fault.drop();
      }
      expect(await s.snap()).toBe(before);
      const rows = await stepRows(t.db, s.c.operationId);
      expect(rows.every((r) => r.state === 'planned' && Number(r.generation) === 0)).toBe(true);
      const done = await s.run('session_prepare');
      expect(done.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
    },
  );

  it('a step that is not ledger-only keeps the launch intent out; the ledger-only ones still go together', async () => {
    const s = await setup({ attachments: true });
    expect(s.rows.map((r) => r.kind)).toContain('attachment_claim');
    const done = await s.run('workspace_attachment');
    expect(done.map((d) => d.claim.kind)).toEqual(['workspace_attachment', 'session_prepare']);
    const intent = await loadStep(t.db, s.rows.find((r) => r.kind === 'launch_intent')!.id);
    expect(intent).toMatchObject({ state: 'planned', generation: 0 });
  });

  it('only the kinds it is given join the batch', async () => {
    const s = await setup();
    const only: LedgerKinds = { workspace_attachment: KINDS.workspace_attachment! };
    const done = await s.run('workspace_attachment', 'w1', only);
    expect(done.map((d) => d.claim.kind)).toEqual(['workspace_attachment']);
    const rows = await stepRows(t.db, s.c.operationId);
    expect(
      rows
        .filter((r) => r.state === 'planned')
        .map((r) => r.kind as string)
        .sort(),
    ).toEqual(['launch_intent', 'session_prepare']);
  });

  it('a sibling whose stored request no longer matches the plan stays out and holds nothing back', async () => {
    const s = await setup();
    const session = s.rows.find((r) => r.kind === 'session_prepare')!;
    await sql(t.db, 'UPDATE task_creation_steps SET request_sha256 = ? WHERE id = ?', ['e'.repeat(64), session.id]);
    const done = await s.run('workspace_attachment');
    expect(done.map((d) => [d.claim.kind, d.outcome.state])).toEqual([['workspace_attachment', 'succeeded']]);
    expect(await loadStep(t.db, session.id)).toMatchObject({ state: 'planned', generation: 0 });
    // Its own wake-up reports the contradiction, with nothing written.
    const before = await s.snap();
    await expectTyped(s.run('session_prepare'), 'evidence_mismatch');
    expect(await s.snap()).toBe(before);
  });

  it('with phase A asked, the batch that arms the launch intent also moves the creation to completing', async () => {
    const s = await setup();
    const { results, phaseA } = await s.batch('session_prepare', 'w1', KINDS, true);
    expect(results.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
    expect(phaseA).toBe('completing');
    const [op] = await sql<{ state: string; completing_at: unknown }>(
      t.db,
      'SELECT state, completing_at FROM task_creation_operations WHERE id = ?',
      [s.c.operationId],
    );
    expect(op!.state).toBe('completing');
    expect(op!.completing_at).not.toBeNull();
    const [task] = await sql<{ creation_state: string }>(t.db, 'SELECT creation_state FROM tasks WHERE id = ?', [
      s.c.taskId,
    ]);
    expect(task!.creation_state).toBe('completing');
    // Phase B stays its own transaction: it finds `completing`, re-verifies everything and commits task.created.
    const done = await completeTaskCreationPhaseB(t.db, s.c.auth);
    expect(done).toMatchObject({ outcome: 'Created', replayed: false });
    expect(await count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [s.c.taskId])).toBe(1);
  });

  it.each(['session_prepare', 'workspace_attachment'] as const)(
    'sends each claim and record with the statements after it: the whole batch and phase A in a bounded number of round trips (first %s)',
    async (first) => {
      const s = await setup();
      const trips = countRoundTrips(t.db);
      const { results, phaseA } = await s.batch(first, 'w1', KINDS, true);
      const calls = trips.calls;
      vi.restoreAllMocks();
      expect(phaseA).toBe('completing');
      // Recorded in the transaction that claimed them: no lease is read back, none is left behind.
      expect(results.map((d) => d.claim.leaseExpiresAt)).toEqual([null, null, null]);
      for (const { claim, outcome } of results) await expectRecordedInOneClaim(t.db, claim, outcome);
      expect(calls).toBeLessThanOrEqual(ROUND_TRIPS[t.db.dialect]);
    },
  );

  it("reads the session it inserted once: the launch intent's world takes the read-back's answer (ADR 0044)", async () => {
    const s = await setup();
    const sent = sentStatements(t.db);
    const { results, phaseA } = await s.batch('session_prepare', 'w1', KINDS, true);
    vi.restoreAllMocks();
    expect(results.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
    expect(phaseA).toBe('completing');
    const sessionReads = sent.filter((text) => /\bFROM task_sessions WHERE id = /.test(text));
    const plain = sessionReads.filter((text) => !/FOR (SHARE|UPDATE)|LOCK IN SHARE MODE/.test(text));
    // The union's lock (which read the row absent, before its insert); the read-back after the insert is answered by
    // the insert itself, which returns the row as stored (both dialects here answer INSERT ... RETURNING; ADR 0051).
    expect(sessionReads.length - plain.length).toBe(1);
    expect(plain).toHaveLength(0);
    expect(sent.filter((text) => /^INSERT INTO task_sessions[\s\S]*RETURNING id, task_id/.test(text))).toHaveLength(1);
  });

  // Phase A verifies the step rows as the batch wrote them while it re-reads the stored ones (one round trip);
  // that verification stands only when the two agree, so what is verified is always what is stored.
  it('phase A verifies the step rows as stored: an armed record stored otherwise than written fails its predicate', async () => {
    const s = await setup();
    const concat = t.db.dialect === 'postgres' ? "NEW.evidence_json || ' '" : "CONCAT(NEW.evidence_json, ' ')";
    const fault = await rewriteOn(
      t.db,
      'task_creation_steps',
      'UPDATE',
      'evidence_json',
      concat,
      `NEW.state = 'armed' AND NEW.operation_id = '${s.c.operationId}'`,
    );
    try {
      const { results, phaseA } = await s.batch('session_prepare', 'w1', KINDS, true);
      expect(results.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
      expect(phaseA).toBe('predicate_failed');
    } finally {
      await fault.drop();
    }
    const op = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      s.c.operationId,
    ]);
    expect(op[0]?.state).toBe('preparing');
  });

  it('a batch that arms nothing, or is not asked, leaves phase A alone', async () => {
    const s = await setup({ attachments: true });
    expect((await s.batch('workspace_attachment', 'w1', KINDS, true)).phaseA).toBeNull();
    const t2 = await setup();
    expect((await t2.batch('session_prepare', 'w1', KINDS, false)).phaseA).toBe('not_asked');
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'preparing'", [t2.c.operationId])).toBe(1);
  });

  it('phase A whose predicate does not hold writes nothing in the batch; the steps still commit, Complete reports it', async () => {
    const s = await setup();
    // A row Begin inserted no longer matches the manifest: Complete must refuse, the steps' records must not be lost.
    await sql(t.db, 'UPDATE tasks SET title = ? WHERE id = ?', ['tampered after Begin', s.c.taskId]);
    const { results, phaseA } = await s.batch('session_prepare', 'w1', KINDS, true);
    expect(phaseA).toBe('predicate_failed');
    expect(results.map((d) => d.outcome.state)).toEqual(['succeeded', 'succeeded', 'armed']);
    const rows = await stepRows(t.db, s.c.operationId);
    expect(rows.map((r) => r.state).sort()).toEqual(['armed', 'succeeded', 'succeeded']);
    expect(await count(t.db, 'task_creation_operations', "id = ? AND state = 'preparing'", [s.c.operationId])).toBe(1);
    await expectTyped(completeTaskCreation(t.db, s.c.auth), 'evidence_mismatch');
  });

  it('a sibling waiting out its back-off (retry_wait) is not taken early', async () => {
    const s = await setup();
    const session = s.rows.find((r) => r.kind === 'session_prepare')!;
    await sql(
      t.db,
      `UPDATE task_creation_steps SET state = 'retry_wait', generation = 1, attempt = 1, next_attempt_at = ${
        t.db.dialect === 'postgres' ? "now() + interval '1 hour'" : 'NOW(3) + INTERVAL 1 HOUR'
      } WHERE id = ?`,
      [session.id],
    );
    const done = await s.run('workspace_attachment');
    expect(done.map((d) => d.claim.kind)).toEqual(['workspace_attachment']);
    expect(await loadStep(t.db, session.id)).toMatchObject({ state: 'retry_wait', generation: 1 });
  });
});

// Phase A's fence (ADR 0030; one aggregate since ADR 0046): the server answers its one row only when the operation's
// step rows are exactly the rows as written.
describe("phase A's step fence", () => {
  it('holds for the rows as stored; a changed column, a trailing space, a missing or an extra row fails it', async () => {
    const s = await setup();
    const stored = await sql<StepRow>(
      t.db,
      `SELECT ${STEP_COLUMNS} FROM task_creation_steps WHERE operation_id = ? ORDER BY id`,
      [s.c.operationId],
    );
    expect(stored).toHaveLength(3);
    const fenced = (written: StepRow[]) =>
      runTransaction(t.db, 'StepFenceCheck', async (tx) => {
        const fences = stepFences(tx, s.c.operationId, written);
        expect(fences).not.toBeNull();
        for (const f of fences!) tx.expect(f.statement, f.rows, () => new Error('fence failed'));
      });
    await expect(fenced(stored)).resolves.toBeUndefined();
    const [a, b, c] = stored as [StepRow, StepRow, StepRow];
    const changed: StepRow[][] = [
      [a, b, { ...c, state: c.state === 'planned' ? 'running' : 'planned' }],
      [a, { ...b, generation: b.generation + 1 }, c],
      [{ ...a, request_json: `${a.request_json} ` }, b, c],
      [a, b],
      [a, b, c, { ...c, id: randomUUID() }],
    ];
    for (const written of changed) await expect(fenced(written)).rejects.toThrow('fence failed');
  });
});
