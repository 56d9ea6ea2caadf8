/**
 * The workflows read model (`GET /workspaces/:id/workflows`, plain reads):
 * each workflow with its steps in position order, and per step its WIP
 * `admitted` count (tasks holding a slot) and `queued` count (tasks waiting
 * for one), store/wip-admission.ts.
 */
import { bool, readRows, type Db } from '../db/tx';

export interface WorkflowStepView {
  id: string;
  name: string;
  position: number;
  wip_limit: number;
  auto_start: boolean;
  admitted: number;
  queued: number;
}

export interface WorkflowView {
  id: string;
  name: string;
  created_at: Date;
  steps: WorkflowStepView[];
}

/** The workspace's workflows, or null when the workspace does not exist or is being deleted. */
export async function readWorkflows(db: Db, workspaceId: string): Promise<WorkflowView[] | null> {
  const [ws] = await readRows<{ state: string }>(db, 'SELECT state FROM workspaces WHERE id = ?', [workspaceId]);
  if (!ws || ws.state !== 'active') return null;
  const workflows = await readRows<{ id: string; name: string; created_at: Date }>(
    db,
    'SELECT id, name, created_at FROM workflows WHERE workspace_id = ? ORDER BY created_at, id',
    [workspaceId],
  );
  const steps = await readRows<{
    id: string;
    workflow_id: string;
    name: string;
    position: number | string;
    wip_limit: number | string;
    auto_start: unknown;
    admitted: number | string;
    queued: number | string;
  }>(
    db,
    `SELECT s.id, s.workflow_id, s.name, s.position, s.wip_limit, s.auto_start,
            (SELECT COUNT(*) FROM tasks t WHERE t.workflow_step_id = s.id AND t.wip_admitted = ?
                AND t.lifecycle_state <> 'deleted') AS admitted,
            (SELECT COUNT(*) FROM tasks t WHERE t.queued_for_step_id = s.id AND t.lifecycle_state <> 'deleted') AS queued
       FROM workflow_steps s WHERE s.workspace_id = ? ORDER BY s.workflow_id, s.position`,
    [true, workspaceId],
  );
  return workflows.map((w) => ({
    ...w,
    steps: steps
      .filter((s) => s.workflow_id === w.id)
      .map((s) => ({
        id: s.id,
        name: s.name,
        position: Number(s.position),
        wip_limit: Number(s.wip_limit),
        auto_start: bool(s.auto_start),
        admitted: Number(s.admitted),
        queued: Number(s.queued),
      })),
  }));
}
