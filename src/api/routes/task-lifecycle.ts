/**
 * A created task's life (`/api/v1`, a member of the task's workspace or an
 * operator; 404 for anyone else, for a task that does not exist, and for a
 * task of a workspace being deleted, exactly alike).
 *
 * PATCH /tasks/:id {workflow_step_id}   moves the task to another step of its
 *   workflow (src/store/task-move.ts): 200 {task, moved, promoted: [task IDs a
 *   freed slot admitted]}; the promoted tasks' agents are launched after the
 *   answer's commit. 400 unknown field or malformed ID; 404 no such step in
 *   the workspace; 409 `workflow_mismatch` (a step of another workflow),
 *   `creation_state_conflict` (still being created), `task_deleted`.
 * DELETE /tasks/:id   deletes a created task (src/store/task-delete.ts):
 *   202 {task_id, deletion_id, revision, event_id, cleanup_job_ids,
 *   promoted}: the deletion and its `task.deleted` event are committed; the
 *   agent's stop and the worktree, branch, session and provider marker
 *   removal run as cleanup jobs. 204 when the task was already deleted
 *   (nothing written). 409 `creation_state_conflict` while it is still being
 *   created.
 * GET /workspaces/:id/workflows   the workspace's workflows and their steps
 *   with `admitted` (tasks holding a WIP slot) and `queued` counts.
 */
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import { readRows, type Db } from '../../db/tx';
import { deletionJobBuilder } from '../../lifecycle/deletion-jobs';
import { deleteTask } from '../../store/task-delete';
import { moveTask } from '../../store/task-move';
import { isUuid, mayRead, principalOf, workspaceAccess } from '../auth';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';
import { readTaskDetail } from '../task-detail';
import { closed, uuid } from '../validation';
import { readWorkflows } from '../workflow-view';

type TaskRoute = { Params: { id: string } };

/**
 * The task's workspace when the caller may act on it: the task exists, the caller is an operator or a member
 * of its workspace, and the workspace is active. Otherwise 404, whichever it was.
 */
export async function authorizeTask(db: Db, req: FastifyRequest<TaskRoute>): Promise<string> {
  const principal = principalOf(req);
  if (!isUuid(req.params.id)) throw notFound('task');
  const [owner] = await readRows<{ workspace_id: string; state: string }>(
    db,
    'SELECT t.workspace_id, w.state FROM tasks t JOIN workspaces w ON w.id = t.workspace_id WHERE t.id = ?',
    [req.params.id],
  );
  if (!owner || !mayRead(principal, owner.workspace_id) || owner.state !== 'active') throw notFound('task');
  return owner.workspace_id;
}

const moveBody = closed({ workflow_step_id: uuid }, ['workflow_step_id']);

export function taskLifecycleRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  const wakeLaunches = async (req: FastifyRequest, taskIds: string[]): Promise<void> => {
    if (taskIds.length === 0 || !deps.wakeLaunches) return;
    // The admissions are committed; a lost wake-up only delays the launch to the reaper's next sweep.
    await deps.wakeLaunches(taskIds).catch((err: unknown) => {
      req.log.warn({ err, task_ids: taskIds }, 'could not wake the launches of admitted tasks');
    });
  };
  return function routes(app, _opts, done): void {
    app.patch<TaskRoute & { Body: { workflow_step_id: string } }>(
      '/tasks/:id',
      { schema: { body: moveBody } },
      async (req) => {
        await authorizeTask(db, req);
        const res = await moveTask(db, req.params.id, req.body.workflow_step_id);
        const promoted = res.admitted.filter((id) => id !== res.task_id);
        await wakeLaunches(req, res.admitted);
        return { task: await readTaskDetail(db, req.params.id), moved: res.moved, promoted };
      },
    );

    app.delete<TaskRoute>('/tasks/:id', async (req, reply) => {
      await authorizeTask(db, req);
      const principal = principalOf(req);
      const res = await deleteTask(db, req.params.id, {
        requestedBy: principal.principal_id,
        jobs: deletionJobBuilder(deps.config.dataDir),
      });
      if (!res.deleted) return reply.status(204).send();
      await wakeLaunches(req, res.admitted);
      // The task.deleted event is committed; a failed wake-up only delays it to the reaper's next sweep.
      await deps.wakeOutbox?.(res.workspace_id).catch((err: unknown) => {
        req.log.warn({ err, workspace_id: res.workspace_id }, 'could not wake the outbox dispatcher');
      });
      await deps.wakeCleanup?.().catch((err: unknown) => {
        req.log.warn({ err }, 'could not wake the cleanup worker; its periodic pass runs the jobs');
      });
      return reply.status(202).send({
        task_id: res.task_id,
        deletion_id: res.deletion_id,
        revision: res.revision,
        event_id: res.eventId,
        cleanup_job_ids: res.cleanupJobIds,
        promoted: res.admitted,
      });
    });

    app.get<{ Params: { id: string } }>('/workspaces/:id/workflows', { onRequest: workspaceAccess }, async (req) => {
      const workflows = await readWorkflows(db, req.params.id);
      if (workflows === null) throw notFound('workspace');
      return { workflows };
    });
    done();
  };
}
