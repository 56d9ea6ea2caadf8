/**
 * Helpers that drive a creation through the Store the way the coordinator
 * will, and snapshot the ledger to prove "zero writes".
 */
import { expect } from 'vitest';
import type { Db } from '../../src/db/tx';
import type { StepKind } from '../../src/domain/vocab';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import { defaultStepHandlers } from '../../src/kinds/registry';
import type { StepHandler } from '../../src/kinds/contract';
import { beginTaskCreation } from '../../src/store/begin';
import { completeTaskCreation } from '../../src/store/complete';
import { claimTaskCreationStep } from '../../src/store/step-claims';
import type { BeginResult, OperationAuthority, Principal } from '../../src/store/types';
import { count, sql } from './db';
import type { SeededWorkspace } from './seed';

export async function begin(
  db: Db,
  ws: SeededWorkspace,
  body: Record<string, unknown>,
  principal?: Principal,
): Promise<BeginResult> {
  return beginTaskCreation(
    db,
    principal ?? ws.member,
    { workspace_id: ws.workspaceId, title: 'a task', ...body },
    { dataDir: ws.dataDir },
  );
}

export async function stepRows(db: Db, operationId: string) {
  return sql<{
    id: string;
    kind: string;
    step_key: string;
    state: string;
    generation: number;
    compensation_state: string;
  }>(
    db,
    'SELECT id, kind, step_key, state, generation, compensation_state FROM task_creation_steps WHERE operation_id = ? ORDER BY kind, step_key',
    [operationId],
  );
}

/**
 * Claims every step and performs it with the real handlers (launch intent
 * last), the way a step worker would. `dataDir` must be the one the plan was
 * built with (worktree paths derive from it).
 */
export async function driveAllSteps(
  db: Db,
  auth: OperationAuthority,
  operationId: string,
  dataDir: string,
  owner = 'worker-1',
): Promise<void> {
  const deps = {
    db,
    dataDir,
    providers: createProviderRegistry({ timeoutMs: 5000 }),
    log: silentLogger(),
    timeoutMs: 5000,
  };
  const rows = await stepRows(db, operationId);
  const ordered = [
    ...rows.filter((r) => r.kind !== 'launch_intent'),
    ...rows.filter((r) => r.kind === 'launch_intent'),
  ];
  for (const row of ordered) {
    const claim = await claimTaskCreationStep(db, auth, { kind: row.kind as StepKind, stepKey: row.step_key }, owner);
    const state = await (defaultStepHandlers[row.kind as StepKind] as StepHandler).perform(deps, claim, async () => {});
    if (state !== 'succeeded' && state !== 'armed') throw new Error(`${row.kind} ended ${state}`);
  }
}

/** Everything the ledger holds about one operation, for before/after equality. */
export async function snapshot(db: Db, operationId: string, taskId: string): Promise<string> {
  const parts = await Promise.all([
    sql(db, 'SELECT * FROM task_creation_operations WHERE id = ?', [operationId]),
    sql(db, 'SELECT * FROM task_creation_steps WHERE operation_id = ? ORDER BY id', [operationId]),
    sql(db, 'SELECT * FROM tasks WHERE id = ?', [taskId]),
    sql(db, 'SELECT * FROM task_identities WHERE task_id = ?', [taskId]),
    sql(db, 'SELECT * FROM task_revisions WHERE task_id = ?', [taskId]),
    sql(db, 'SELECT * FROM event_outbox WHERE task_id = ?', [taskId]),
    sql(db, 'SELECT * FROM task_resource_cleanup_jobs WHERE operation_id = ?', [operationId]),
    sql(db, 'SELECT * FROM external_id_releases WHERE creation_operation_id = ? ORDER BY id', [operationId]),
  ]);
  return JSON.stringify(parts);
}

export async function expectTyped(promise: Promise<unknown>, code: string): Promise<void> {
  await expect(promise).rejects.toMatchObject({ code });
}

/** A created task (every step driven, Complete done): what a parent or blocker must be. */
export async function settledTask(
  db: Db,
  ws: SeededWorkspace,
  body: Record<string, unknown> = {},
): Promise<BeginResult> {
  const res = await begin(db, ws, { title: 'settled', ...body });
  const auth: OperationAuthority = { kind: 'handle', handle: res.handle! };
  await driveAllSteps(db, auth, res.operationId, ws.dataDir);
  await completeTaskCreation(db, auth);
  return res;
}

/** Rows a creation writes in this workspace (tasks, operations, steps, identities): unchanged when nothing was. */
export async function creationWrites(db: Db, workspaceId: string): Promise<number[]> {
  return Promise.all(
    ['tasks', 'task_creation_operations', 'task_creation_steps', 'task_identities'].map((table) =>
      count(db, table, 'workspace_id = ?', [workspaceId]),
    ),
  );
}
