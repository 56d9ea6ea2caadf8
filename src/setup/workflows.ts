/**
 * Creating a workflow with its ordered steps. The first step (position 0) is
 * the default placement of a new task. One transaction: workspace (tier 1,
 * shared), then the workflow and its step rows (tier 2, new rows).
 */
import { randomUUID } from 'node:crypto';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { lockActiveWorkspaceLocked } from './workspaces';

export interface WorkflowStepInput {
  name: string;
  /** 0 = unlimited. */
  wip_limit?: number;
  auto_start?: boolean;
}

export interface WorkflowStepRow {
  id: string;
  name: string;
  position: number;
  wip_limit: number;
  auto_start: boolean;
}

export interface WorkflowRow {
  id: string;
  workspace_id: string;
  name: string;
  steps: WorkflowStepRow[];
}

export async function createWorkflow(
  db: Db,
  workspaceId: string,
  input: { name: string; steps: WorkflowStepInput[] },
): Promise<WorkflowRow> {
  const id = randomUUID();
  const steps: WorkflowStepRow[] = input.steps.map((s, position) => ({
    id: randomUUID(),
    name: s.name,
    position,
    wip_limit: s.wip_limit ?? 0,
    auto_start: s.auto_start ?? false,
  }));
  await runTransaction(db, 'CreateWorkflow', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    tx.lockRow(TIER.WORKFLOW, 'workflows', id);
    await tx.exec(`INSERT INTO workflows (id, workspace_id, name, created_at) VALUES (?, ?, ?, ${tx.now})`, [
      id,
      workspaceId,
      input.name,
    ]);
    for (const s of steps) {
      await tx.exec(
        `INSERT INTO workflow_steps (id, workflow_id, workspace_id, name, position, wip_limit, auto_start, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ${tx.now})`,
        [s.id, id, workspaceId, s.name, s.position, s.wip_limit, s.auto_start],
      );
    }
  });
  return { id, workspace_id: workspaceId, name: input.name, steps };
}
