/**
 * Workspace deletion (`/api/v1`, operator token; 403 for anyone else, decided
 * before anything is read).
 *
 * DELETE /workspaces/:id   records the deletion (store/workspace-deletion.ts)
 *   and answers at once 202 {deletion_operation_id, state}; the cascade runs
 *   on the reaper queue (lifecycle/workspace-deletion-runner.ts). Asking
 *   again answers 202 with the same ID, while it runs and after it ended.
 *   404 for a workspace that does not exist.
 * GET /workspace-deletions/:id   {id, workspace_id, state, requested_at,
 *   completed_at, counts: {completed, aborted, deleted_tasks,
 *   cancelled_launches, transferred_launches, cleanup_jobs},
 *   waiting_operations, batches}; 404 for an unknown ID.
 */
import type { FastifyPluginCallback } from 'fastify';
import { failpoint } from '../../failpoints';
import { readWorkspaceDeletion, requestWorkspaceDeletion } from '../../store/workspace-deletion';
import { isUuid, operatorOnly, requireOperator, requireWorkspace } from '../auth';
import type { ApiDeps } from '../deps';
import { notFound } from '../errors';

export function workspaceDeletionRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db } = deps;
  return function routes(app, _opts, done): void {
    app.delete<{ Params: { id: string } }>('/workspaces/:id', { onRequest: operatorOnly }, async (req, reply) => {
      const principal = requireOperator(req);
      const workspaceId = requireWorkspace(req, req.params.id);
      const { deletion } = await requestWorkspaceDeletion(db, workspaceId, principal.principal_id);
      await failpoint('after_workspace_deletion_accept', { deletionId: deletion.id });
      if (deletion.state === 'running') {
        // The deletion is committed; a lost wake-up only waits for the reaper's next sweep, which runs it too.
        await deps.startWorkspaceDeletion?.(deletion.id, workspaceId).catch((err: unknown) => {
          req.log.warn({ err, deletion_id: deletion.id }, 'could not enqueue the deletion cascade');
        });
      }
      return reply.status(202).send({ deletion_operation_id: deletion.id, state: deletion.state });
    });

    app.get<{ Params: { id: string } }>('/workspace-deletions/:id', { onRequest: operatorOnly }, async (req) => {
      requireOperator(req);
      if (!isUuid(req.params.id)) throw notFound('workspace deletion');
      const deletion = await readWorkspaceDeletion(db, req.params.id);
      if (!deletion) throw notFound('workspace deletion');
      return deletion;
    });
    done();
  };
}
