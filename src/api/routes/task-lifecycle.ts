/**
 * A created task's life (`/api/v1`; move and delete are `../commands/task-commands.ts`), a member of the task's workspace or an
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
import type { FastifyPluginCallback } from 'fastify';
import { principalOf, workspaceAccess } from '../auth';
import { requestContext } from '../commands/context';
import { moveBody } from '../commands/schemas';
import { deleteTaskCommand, moveTaskCommand } from '../commands/task-commands';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';
import { readWorkflows } from '../workflow-view';

type TaskRoute = { Params: { id: string } };

export function taskLifecycleRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  return function routes(app, _opts, done): void {
    app.patch<TaskRoute & { Body: { workflow_step_id: string } }>(
      '/tasks/:id',
      { schema: { body: moveBody } },
      async (req) =>
        moveTaskCommand(requestContext(deps, principalOf(req), req.log), req.params.id, req.body.workflow_step_id),
    );

    app.delete<TaskRoute>('/tasks/:id', async (req, reply) => {
      const { status, body } = await deleteTaskCommand(requestContext(deps, principalOf(req), req.log), req.params.id);
      return body === null ? reply.status(status).send() : reply.status(status).send(body);
    });

    app.get<{ Params: { id: string } }>('/workspaces/:id/workflows', { onRequest: workspaceAccess }, async (req) => {
      const workflows = await readWorkflows(db, req.params.id);
      if (workflows === null) throw notFound('workspace');
      return { workflows };
    });
    done();
  };
}
