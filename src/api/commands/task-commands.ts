/**
 * The created-task commands, one per REST route and MCP tool:
 * - read (`GET /tasks/:id`, `get_task`): the task with creation state,
 *   placement, blockers, session and launch state; 404 when absent, still
 *   being created, deleted, outside the caller's scope or in a workspace
 *   being deleted.
 * - move (`PATCH /tasks/:id`, `move_task`): 200 {task, moved, promoted}.
 * - done (`POST /tasks/:id/done`, `mark_task_done`): 200 {task, already_done,
 *   dependencies_resolved, resolution_pending, promoted}.
 * - delete (`DELETE /tasks/:id`, `delete_task`): 202 {task_id, deletion_id,
 *   revision, event_id, cleanup_job_ids, promoted}, or 204 (null body) when
 *   it was already deleted.
 * Every command authorizes on the task's workspace first (authorize.ts), so
 * an outsider learns nothing, not even that the task exists. Inputs arrive
 * validated by the transport against `./schemas.ts`.
 */
import { deletionJobBuilder } from '../../lifecycle/deletion-jobs';
import { deleteTask } from '../../store/task-delete';
import { markTaskDone } from '../../store/task-done';
import { moveTask } from '../../store/task-move';
import { notFound } from '../errors';
import { readTaskDetail } from '../task-detail';
import { authorizeTaskFor } from './authorize';
import type { CommandContext, CommandResult } from './context';
import { wakeAdmitted, wakeCleanupPass, wakeWorkspaceOutbox } from './wake';

export async function readTaskCommand(ctx: CommandContext, taskId: unknown): Promise<Record<string, unknown>> {
  const { db } = ctx.deps;
  await authorizeTaskFor(db, ctx.principal, taskId);
  const task = await readTaskDetail(db, taskId as string);
  // A deleted task is gone for ordinary reads; its task.deleted event stays in the workspace's feed. A task
  // still being created is visible only to the exact external-ID lookup (spec: "Only exact external-ID lookup
  // may expose preparing|completing"); its creation operation is readable at GET /creation-operations/:id.
  if (!task || task.lifecycle_state === 'deleted' || !task.creation_complete) throw notFound('task');
  return { task };
}

export async function moveTaskCommand(
  ctx: CommandContext,
  taskId: unknown,
  workflowStepId: string,
): Promise<Record<string, unknown>> {
  const { db } = ctx.deps;
  await authorizeTaskFor(db, ctx.principal, taskId);
  const res = await moveTask(db, taskId as string, workflowStepId);
  const promoted = res.admitted.filter((id) => id !== res.task_id);
  await wakeAdmitted(ctx, res.admitted);
  return { task: await readTaskDetail(db, taskId as string), moved: res.moved, promoted };
}

export async function markTaskDoneCommand(ctx: CommandContext, taskId: unknown): Promise<Record<string, unknown>> {
  const { db } = ctx.deps;
  await authorizeTaskFor(db, ctx.principal, taskId);
  const result = await markTaskDone(db, taskId as string);
  await wakeAdmitted(ctx, result.admitted);
  if (result.dependencies_resolved.length > 0) await wakeWorkspaceOutbox(ctx, result.workspace_id);
  const task = await readTaskDetail(db, taskId as string);
  return {
    task,
    already_done: result.already_done,
    dependencies_resolved: result.dependencies_resolved,
    resolution_pending: result.resolution_pending,
    promoted: result.admitted,
  };
}

export async function deleteTaskCommand(ctx: CommandContext, taskId: unknown): Promise<CommandResult> {
  const { db } = ctx.deps;
  await authorizeTaskFor(db, ctx.principal, taskId);
  const res = await deleteTask(db, taskId as string, {
    requestedBy: ctx.principal.principal_id,
    jobs: deletionJobBuilder(ctx.deps.config.dataDir),
  });
  if (!res.deleted) return { status: 204, body: null };
  await wakeAdmitted(ctx, res.admitted);
  // The task.deleted event is committed; a failed wake-up only delays it to the reaper's next sweep.
  await wakeWorkspaceOutbox(ctx, res.workspace_id);
  await wakeCleanupPass(ctx);
  return {
    status: 202,
    body: {
      task_id: res.task_id,
      deletion_id: res.deletion_id,
      revision: res.revision,
      event_id: res.eventId,
      cleanup_job_ids: res.cleanupJobIds,
      promoted: res.admitted,
    },
  };
}
