/**
 * The create command (`POST /tasks`, MCP `create_task`): drives one creation
 * through the injected `createTask` (authorization, validation and the
 * external-ID rules all happen there, authorization first, nothing written
 * on bad input) and maps its outcome to the companion notes' answer:
 * done -> 200 {task, deduplicated, creation_complete, operation_id} for
 * Created (false, true), FoundSettled (true, true), FoundUnsettled (true,
 * false), CreatedIdentityLost (false, true, no `external_id`); pending -> 202
 * (false, false); aborted -> throws 422 `creation_aborted` with its cause.
 */
import type { CreateTaskOutcome } from '../../coordinator/create-task';
import type { BeginOutcome } from '../../domain/vocab';
import { creationAborted, HttpError } from '../errors';
import { taskBody } from '../task-detail';
import type { Caller } from '../../store/types';
import type { ApiDeps } from '../deps';
import type { CommandResult } from './context';

/** The response flags of each outcome, exactly the companion notes' table. */
const OUTCOME_FLAGS: Record<BeginOutcome, { deduplicated: boolean; creation_complete: boolean; external_id: boolean }> =
  {
    Created: { deduplicated: false, creation_complete: true, external_id: true },
    FoundSettled: { deduplicated: true, creation_complete: true, external_id: true },
    FoundUnsettled: { deduplicated: true, creation_complete: false, external_id: true },
    CreatedIdentityLost: { deduplicated: false, creation_complete: true, external_id: false },
  };

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

/** What the create command reads (a subset of `CommandContext`, so the admission worker runs it without an API). */
export interface CreateContext {
  deps: Pick<ApiDeps, 'createTask' | 'metrics'>;
  /** REST passes a lookup: the token is read with Begin's first reads (ADR 0025). */
  principal: Caller;
}

export async function createTaskCommand(ctx: CreateContext, body: unknown, waitMs: number): Promise<CommandResult> {
  const { metrics } = ctx.deps;
  let result: CreateTaskOutcome;
  try {
    result = await ctx.deps.createTask(ctx.principal, body, { waitMs });
  } catch (err) {
    // An unknown token (read by Begin, ADR 0025) is not a creation that failed.
    if (!(err instanceof HttpError && err.status === 401)) metrics.creations.inc({ outcome: 'error' });
    throw err;
  }
  metrics.creations.inc({ outcome: result.status === 'done' ? result.outcome : result.status });
  return createResponse(result);
}
