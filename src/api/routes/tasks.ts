/**
 * Task routes (`/api/v1`, any authenticated caller).
 *
 * POST /tasks[?wait_ms=N]  drives one creation through the injected
 *   `createTask` (authorization, validation and the external-ID rules all
 *   happen there, authorization first). Responses (companion notes §2):
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
import type { CreateTaskOutcome } from '../../coordinator/create-task';
import type { BeginOutcome } from '../../domain/vocab';
import { principalOf } from '../auth';
import type { ApiDeps } from '../deps';
import { creationAborted, notFound } from '../errors';
import { authorizeTask } from './task-lifecycle';
import { markTaskDone } from '../../store/task-done';
import { readTaskDetail, taskBody } from '../task-detail';
import { closed } from '../validation';

/** Why 15 s: most creations finish in well under a second; 15 s covers slow Git and provider calls
 *  while staying below common proxy timeouts. 120 s is the most a caller may ask for. */
export const DEFAULT_WAIT_MS = 15_000;
export const MAX_WAIT_MS = 120_000;

/** The response flags of each outcome, exactly the companion notes' table. */
const OUTCOME_FLAGS: Record<BeginOutcome, { deduplicated: boolean; creation_complete: boolean; external_id: boolean }> =
  {
    Created: { deduplicated: false, creation_complete: true, external_id: true },
    FoundSettled: { deduplicated: true, creation_complete: true, external_id: true },
    FoundUnsettled: { deduplicated: true, creation_complete: false, external_id: true },
    CreatedIdentityLost: { deduplicated: false, creation_complete: true, external_id: false },
  };

const createQuery = closed({
  wait_ms: { type: 'integer', minimum: 0, maximum: MAX_WAIT_MS, default: DEFAULT_WAIT_MS },
});

export function createResponse(result: CreateTaskOutcome): { status: number; body: Record<string, unknown> } {
  if (result.status === 'aborted') throw creationAborted(result.operationId, result.abortCause);
  if (result.status === 'pending') {
    return {
      status: 202,
      body: {
        task: taskBody(result.task, true),
        deduplicated: false,
        creation_complete: false,
        operation_id: result.operationId,
      },
    };
  }
  const flags = OUTCOME_FLAGS[result.outcome];
  return {
    status: 200,
    body: {
      task: taskBody(result.task, flags.external_id),
      deduplicated: flags.deduplicated,
      creation_complete: flags.creation_complete,
      operation_id: result.operationId,
    },
  };
}

export function taskRoutes(deps: ApiDeps): FastifyPluginCallback {
  const { db, metrics } = deps;
  return function routes(app, _opts, done): void {
    app.post<{ Querystring: { wait_ms: number } }>(
      '/tasks',
      { schema: { querystring: createQuery } },
      async (req, reply) => {
        const principal = principalOf(req);
        let result: CreateTaskOutcome;
        try {
          result = await deps.createTask(principal, req.body, { waitMs: req.query.wait_ms });
        } catch (err) {
          metrics.creations.inc({ outcome: 'error' });
          throw err;
        }
        metrics.creations.inc({ outcome: result.status === 'done' ? result.outcome : result.status });
        const { status, body } = createResponse(result);
        return reply.status(status).send(body);
      },
    );

    app.get<{ Params: { id: string } }>('/tasks/:id', async (req) => {
      await authorizeTask(db, req);
      const task = await readTaskDetail(db, req.params.id);
      // A deleted task is gone for ordinary reads; its task.deleted event stays in the workspace's feed. A task
      // still being created is visible only to the exact external-ID lookup (spec: "Only exact external-ID lookup
      // may expose preparing|completing"); its creation operation is readable at GET /creation-operations/:id.
      if (!task || task.lifecycle_state === 'deleted' || !task.creation_complete) throw notFound('task');
      return { task };
    });

    app.post<{ Params: { id: string } }>('/tasks/:id/done', async (req) => {
      // Authorized on the task's workspace first: an outsider learns nothing, not even that the task exists.
      await authorizeTask(db, req);
      const result = await markTaskDone(db, req.params.id);
      if (result.admitted.length > 0 && deps.wakeLaunches) {
        // The admissions are committed; a lost wake-up only delays the launch to the reaper's next sweep.
        await deps.wakeLaunches(result.admitted).catch((err: unknown) => {
          req.log.warn({ err, task_ids: result.admitted }, 'could not wake the launches of admitted tasks');
        });
      }
      if (result.dependencies_resolved.length > 0 && deps.wakeOutbox) {
        // The events are committed; a failed wake-up only delays them to the reaper's next sweep.
        await deps.wakeOutbox(result.workspace_id).catch((err: unknown) => {
          req.log.warn({ err, workspace_id: result.workspace_id }, 'could not wake the outbox dispatcher');
        });
      }
      const task = await readTaskDetail(db, req.params.id);
      return {
        task,
        already_done: result.already_done,
        dependencies_resolved: result.dependencies_resolved,
        resolution_pending: result.resolution_pending,
        promoted: result.admitted,
      };
    });
    done();
  };
}
