/**
 * A wake-up's hint (ADR 0020, `hintOperation`): the first transaction a
 * worker runs for an operation takes its first locks by what Begin knew —
 * workspace, task, whether the task has an external ID — instead of reading
 * them first, and checks them under those locks. A right hint saves the read;
 * a hint that names another workspace or task, or says "no external ID" of a
 * task that has one, restarts the command with the read (the key lock is then
 * taken), and the batch commits exactly as without a hint. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { StepKind } from '../../src/domain/vocab';
import { claimAndApplyLedgerSteps } from '../../src/store/ledger-step';
import { hintOperation } from '../../src/store/operation-guard';
import { useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { stepRows } from '../support/ledger';
import { createGroupTask, seedWithFiles, LEDGER_KINDS } from './support';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

const KINDS = LEDGER_KINDS;

async function setup(body: Record<string, unknown> = {}) {
  const { ws, c } = await createGroupTask(t.db, () => body);
  const rows = await stepRows(t.db, c.operationId);
  /** The ledger batch with Complete's phase A (which takes the external-ID key), counting its round trips. */
  const batch = async () => {
    const row = rows.find((r) => r.kind === 'session_prepare')!;
    const trips = countRoundTrips(t.db);
    const out = await claimAndApplyLedgerSteps(
      t.db,
      // As a worker drives it (a caller's handle never uses a hint: its authority lock needs the actor first).
      { kind: 'operation', operationId: c.operationId, actor: 'w1' },
      { kind: 'session_prepare' as StepKind, stepKey: row.step_key },
      'w1',
      30_000,
      KINDS,
      { phaseA: true },
    );
    const calls = trips.calls;
    vi.restoreAllMocks();
    return { states: out.results.map((d) => d.outcome.state), phaseA: out.phaseA, calls };
  };
  return { ws, c, batch };
}

const DONE = { states: ['succeeded', 'succeeded', 'armed'], phaseA: 'completing' };

/** Round trips of the batch with no hint: the guard reads the operation before its first lock. */
async function unhinted(body: Record<string, unknown> = {}): Promise<number> {
  const s = await setup(body);
  const out = await s.batch();
  expect(out).toMatchObject(DONE);
  return out.calls;
}

describe("a wake-up's hint", () => {
  it('a right hint saves the read before the first lock: one round trip fewer, the same batch', async () => {
    const before = await unhinted();
    const s = await setup();
    hintOperation(s.c.operationId, { workspaceId: s.ws.workspaceId, taskId: s.c.taskId, externalId: false });
    expect(await s.batch()).toEqual({ ...DONE, calls: before - 1 });
  });

  it('a right hint for a task with an external ID saves it too', async () => {
    const before = await unhinted({ external_id: `hint-${randomUUID()}` });
    const s = await setup({ external_id: `hint-${randomUUID()}` });
    hintOperation(s.c.operationId, { workspaceId: s.ws.workspaceId, taskId: s.c.taskId, externalId: true });
    expect(await s.batch()).toEqual({ ...DONE, calls: before - 1 });
  });

  it('a hint naming another workspace or task restarts the command; the batch commits as without it', async () => {
    const before = await unhinted();
    const another = (await seedWithFiles(t.db)).ws.workspaceId;
    const wrongs = { 'no workspace': randomUUID(), 'another workspace': another, 'another task': null };
    for (const [what, workspaceId] of Object.entries(wrongs)) {
      const s = await setup();
      hintOperation(s.c.operationId, {
        workspaceId: workspaceId ?? s.ws.workspaceId,
        taskId: what === 'another task' ? randomUUID() : s.c.taskId,
        externalId: false,
      });
      const out = await s.batch();
      expect(out).toMatchObject(DONE);
      // The attempt that locked by the hint, rolled back, then the whole batch with the read.
      expect(out.calls).toBeGreaterThan(before);
    }
  });

  it('"no external ID" of a task that has one restarts the command, which then takes its key', async () => {
    const before = await unhinted({ external_id: `hint-${randomUUID()}` });
    const s = await setup({ external_id: `hint-${randomUUID()}` });
    hintOperation(s.c.operationId, { workspaceId: s.ws.workspaceId, taskId: s.c.taskId, externalId: false });
    const out = await s.batch();
    expect(out).toMatchObject(DONE);
    expect(out.calls).toBeGreaterThan(before);
  });
});
