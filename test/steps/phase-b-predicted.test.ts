/**
 * Phase B answered from predictions (ADR 0033): the worker whose ledger batch
 * committed Complete's phase A recorded what that batch read and wrote, and
 * phase B answers its reads from there, sending each lock, a fence per read
 * that the server checks before COMMIT, its writes and COMMIT in one round
 * trip. A row that is not as predicted — changed between the phases — fails
 * its fence: the attempt rolls back and phase B starts over reading, where
 * it completes or refuses exactly as it would have. Both dialects.
 */
import { hostname } from 'node:os';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Predictions } from '../../src/db/predicted-reads';
import type { StepKind } from '../../src/domain/vocab';
import { completeTaskCreationPhaseB } from '../../src/store/complete';
import { claimAndApplyLedgerSteps } from '../../src/store/ledger-step';
import { count, sql, useTestDb } from '../support/db';
import { stepRows } from '../support/ledger';
import { countRoundTrips } from '../support/round-trips';
import { createGroupTask, LEDGER_KINDS } from './support';

const t = useTestDb();
const CLAIMANT = { owner: `${hostname()}:predicted`, leaseMs: 30_000 };

afterEach(() => {
  vi.restoreAllMocks();
});

/** A group task whose ledger batch committed phase A, and what it predicts phase B reads. */
async function afterPhaseA() {
  const { c } = await createGroupTask(t.db);
  const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'session_prepare')!;
  const auth = { kind: 'operation', operationId: c.operationId, actor: 'w1' } as const;
  const batch = await claimAndApplyLedgerSteps(
    t.db,
    auth,
    { kind: 'session_prepare' as StepKind, stepKey: row.step_key },
    'w1',
    30_000,
    LEDGER_KINDS,
    { phaseA: true },
  );
  expect(batch.phaseA).toBe('completing');
  const predictions = await batch.predictions!();
  expect(predictions).toBeDefined();
  /** Phase B as the worker runs it (a claimant, the batch's rows and predictions); its outcome and round trips. */
  const phaseB = async (predicted: Predictions | null = predictions!) => {
    const trips = countRoundTrips(t.db);
    try {
      const result = await completeTaskCreationPhaseB(t.db, auth, CLAIMANT, batch.steps, predicted ?? undefined);
      return { outcome: result.outcome, calls: trips.calls, launch: await result.launch };
    } finally {
      vi.restoreAllMocks();
    }
  };
  return { c, phaseB };
}

const createdEvents = (taskId: string) =>
  count(t.db, 'event_outbox', "task_id = ? AND type = 'task.created'", [taskId]);

async function operationState(operationId: string): Promise<string | undefined> {
  const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
    operationId,
  ]);
  return op?.state;
}

describe('phase B answered from what the batch that committed phase A left', () => {
  it('commits in one round trip: the same creation, its event and its launch claim', async () => {
    const s = await afterPhaseA();
    const out = await s.phaseB();
    expect(out).toMatchObject({ outcome: 'Created', calls: 1 });
    expect(out.launch).toMatchObject({ operationId: s.c.operationId });
    expect(await createdEvents(s.c.taskId)).toBe(1);
    expect(await operationState(s.c.operationId)).toBe('completed');
    expect(
      await count(t.db, 'task_launch_dispatch_claims', "creation_operation_id = ? AND state = 'running'", [
        s.c.operationId,
      ]),
    ).toBe(1);
  });

  it('without predictions it reads first: more round trips, the same creation', async () => {
    const s = await afterPhaseA();
    const out = await s.phaseB(null);
    expect(out.outcome).toBe('Created');
    expect(out.calls).toBeGreaterThan(1);
    expect(await createdEvents(s.c.taskId)).toBe(1);
  });

  it('an effect row changed between the phases fails its fence; phase B reads it and refuses, writing nothing', async () => {
    const s = await afterPhaseA();
    await sql(t.db, 'DELETE FROM workspace_group_members WHERE task_id = ?', [s.c.taskId]);
    await expect(s.phaseB()).rejects.toMatchObject({ code: 'evidence_mismatch' });
    expect(await createdEvents(s.c.taskId)).toBe(0);
    expect(await operationState(s.c.operationId)).toBe('completing');
    expect(await count(t.db, 'task_launch_dispatch_claims', 'creation_operation_id = ?', [s.c.operationId])).toBe(0);
  });

  it('a value that differs only by a trailing space is not the predicted one', async () => {
    const s = await afterPhaseA();
    // The task's title (a row Begin inserted, checked against the manifest), as MySQL's PAD SPACE `=` would call
    // it equal to the predicted one.
    await sql(t.db, "UPDATE tasks SET title = CONCAT(title, ' ') WHERE id = ?", [s.c.taskId]);
    await expect(s.phaseB()).rejects.toMatchObject({ code: 'evidence_mismatch' });
    expect(await createdEvents(s.c.taskId)).toBe(0);
  });

  it('an unlocked read that changed (the step a task is placed in) restarts phase B, which completes once by what it reads', async () => {
    const s = await afterPhaseA();
    const [task] = await sql<{ workflow_step_id: string | null }>(
      t.db,
      'SELECT workflow_step_id FROM tasks WHERE id = ?',
      [s.c.taskId],
    );
    expect(task?.workflow_step_id).toBeTruthy();
    // A WIP limit set on the task's step after the batch: the claim must now go through admission.
    await sql(t.db, 'UPDATE workflow_steps SET wip_limit = 5 WHERE id = ?', [task!.workflow_step_id]);
    const out = await s.phaseB();
    expect(out.outcome).toBe('Created');
    expect(out.calls).toBeGreaterThan(1);
    expect(await createdEvents(s.c.taskId)).toBe(1);
    // In a limited step phase B takes no launch claim (store/launch-claim-in-complete.ts): the prediction was not used.
    expect(out.launch ?? null).toBeNull();
    expect(await count(t.db, 'task_launch_dispatch_claims', 'creation_operation_id = ?', [s.c.operationId])).toBe(0);
  });
});
