/**
 * Phase B's verification guessed ahead (ADR 0021): the worker whose ledger
 * batch committed Complete's phase A knows the step rows it verified, so
 * phase B sends the verification's locks and reads for those rows in its
 * guard's round trip. When the rows read under lock are the ones guessed the
 * verification is answered from there (one round trip fewer); a guess that
 * differs restarts phase B, which then reads before it locks; and a row
 * changed between the phases is still caught, since the guessed reads are the
 * reads. Both dialects.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { completeTaskCreationPhaseB } from '../../src/store/complete';
import type { StepRow } from '../../src/store/types';
import { count, sql, useTestDb } from '../support/db';
import { countRoundTrips } from '../support/round-trips';
import { groupTaskBatchWithPhaseA } from './support';

const t = useTestDb();

afterEach(() => {
  vi.restoreAllMocks();
});

/** A group task whose ledger batch committed phase A; the step rows it verified. */
async function afterPhaseA() {
  const { c, auth, batch } = await groupTaskBatchWithPhaseA(t.db);
  expect(batch.phaseA).toBe('completing');
  expect(batch.steps?.map((s) => s.kind).sort()).toEqual(['launch_intent', 'session_prepare', 'workspace_attachment']);
  /** Phase B as the worker runs it, with or without the rows; its outcome and round trips. */
  const phaseB = async (known?: readonly StepRow[]) => {
    const trips = countRoundTrips(t.db);
    try {
      const result = await completeTaskCreationPhaseB(t.db, auth, undefined, known);
      return { outcome: result.outcome, calls: trips.calls };
    } finally {
      vi.restoreAllMocks();
    }
  };
  return { c, steps: batch.steps!, phaseB };
}

async function createdEvents(taskId: string): Promise<number> {
  return count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId]);
}

/** Phase B's round trips without a guess (the verification's own round trip). */
async function unguessed(): Promise<number> {
  const s = await afterPhaseA();
  const out = await s.phaseB();
  expect(out.outcome).toBe('Created');
  return out.calls;
}

describe("phase B's verification guessed from the rows phase A committed", () => {
  it('goes ahead with the guard: one round trip fewer, the same creation', async () => {
    const before = await unguessed();
    const s = await afterPhaseA();
    expect(await s.phaseB(s.steps)).toEqual({ outcome: 'Created', calls: before - 1 });
    expect(await createdEvents(s.c.taskId)).toBe(1);
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      s.c.operationId,
    ]);
    expect(op?.state).toBe('completed');
  });

  it('a guess the rows do not bear out restarts phase B, which reads first and completes once', async () => {
    const before = await unguessed();
    const s = await afterPhaseA();
    // Stale rows: the launch intent as it was before the batch armed it. The guess is then only what the
    // verification would still issue over them (the planned rows' reads), not what it issues over the stored rows.
    const guess = s.steps.map((step) =>
      step.kind === 'launch_intent'
        ? { ...step, state: 'running' as const, evidence_json: null, evidence_sha256: null }
        : step,
    );
    const out = await s.phaseB(guess);
    expect(out.outcome).toBe('Created');
    // The attempt that guessed (rolled back), then phase B with its verification's own round trip.
    expect(out.calls).toBeGreaterThan(before);
    expect(await createdEvents(s.c.taskId)).toBe(1);
  });

  // The task row's check is answered by the guard's lock of it (ADR 0034), which goes ahead with the guess.
  it.each(['title', 'description'])(
    "the task row's %s changed between the phases is caught under the guess: nothing completes",
    async (column) => {
      const s = await afterPhaseA();
      await sql(t.db, `UPDATE tasks SET ${column} = ? WHERE id = ?`, ['changed between the phases', s.c.taskId]);
      await expect(s.phaseB(s.steps)).rejects.toMatchObject({ code: 'evidence_mismatch' });
      expect(await createdEvents(s.c.taskId)).toBe(0);
    },
  );

  it('a row changed between the phases is caught under the guess: nothing completes', async () => {
    const s = await afterPhaseA();
    await sql(t.db, 'DELETE FROM workspace_group_members WHERE task_id = ?', [s.c.taskId]);
    await expect(s.phaseB(s.steps)).rejects.toMatchObject({ code: 'evidence_mismatch' });
    expect(await createdEvents(s.c.taskId)).toBe(0);
    const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
      s.c.operationId,
    ]);
    expect(op?.state).toBe('completing');
  });
});
