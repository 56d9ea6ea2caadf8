/**
 * Task routes (`/api/v1`, any authenticated caller); the work is in the
 * transport-neutral commands (`../commands/`), which MCP tools call too.
 *
 * POST /tasks[?wait_ms=N]  drives one creation (commands/create.ts).
 *   Responses (companion notes §2):
 *   done -> 200 {task, deduplicated, creation_complete, operation_id}:
 *     Created (false, true), FoundSettled (true, true), FoundUnsettled
 *     (true, false), CreatedIdentityLost (false, true, no `external_id`);
 *   pending -> 202 {task, creation_complete: false, deduplicated: false, operation_id};
 *   aborted -> 422 {error: "creation_aborted", cause}.
 *   `wait_ms` is 0..120000 (default 15000).
 * GET /tasks/:id  the task with creation state, placement (step, WIP slot or
 *   queue place), blockers (all, and those not yet done), session and launch
 *   state; 404 when absent, still being created (only the external-ID lookup
 *   shows an unsettled task), deleted, outside the caller's workspace, or in a
 *   workspace being deleted.
 * POST /tasks/:id/done  marks a created task done (`src/store/task-done.ts`):
 *   200 {task, already_done, dependencies_resolved: [task ids it unblocked],
 *   resolution_pending: [unblocked tasks still being created; their Complete
 *   fires the event]};
 *   a repeat is 200 with `already_done: true` and fires nothing; 404 as for
 *   GET; 409 `creation_state_conflict` while the task is still being created
 *   or once it is deleted.
 *   A deferred start whose last blocker this was launches on the event's
 *   delivery.
 */
import type { FastifyPluginCallback } from 'fastify';
import { callerOf, principalOf } from '../auth';
import { requestContext } from '../commands/context';
import { createTaskCommand } from '../commands/create';
import { createQuery } from '../commands/schemas';
import { markTaskDoneCommand, readTaskCommand } from '../commands/task-commands';
import type { ApiDeps } from '../deps';

export { createResponse } from '../commands/create';
export { DEFAULT_WAIT_MS, MAX_WAIT_MS } from '../commands/schemas';

export function taskRoutes(deps: ApiDeps): FastifyPluginCallback {
  return function routes(app, _opts, done): void {
    app.post<{ Querystring: { wait_ms: number } }>(
      '/tasks',
      // The token is read with Begin's first reads (ADR 0025); Begin answers nothing before it is known.
      { schema: { querystring: createQuery }, config: { readTokenWithRequest: true } },
      async (req, reply) => {
        const { status, body } = await createTaskCommand(
          { deps, principal: callerOf(req) },
          req.body,
          req.query.wait_ms,
        );
        return reply.status(status).send(body);
      },
    );

    app.get<{ Params: { id: string } }>('/tasks/:id', async (req) =>
      readTaskCommand(requestContext(deps, principalOf(req), req.log), req.params.id),
    );

    app.post<{ Params: { id: string } }>('/tasks/:id/done', async (req) =>
      markTaskDoneCommand(requestContext(deps, principalOf(req), req.log), req.params.id),
    );
    done();
  };
}
