/**
 * The producer client's public types: the create request (the body of
 * `POST /api/v1/tasks`, the `task` of MCP `create_task`, the `body` of an
 * admission job), the create answer, and the typed errors every producer
 * path throws with the API's stable codes.
 */
export type { CreateTaskRequest } from '../plan/create-request';

/** The answer of a creation, whichever path carried it (REST, admission job). */
export interface CreateTaskAnswer {
  /** 200: finished or found; 202: still being created when the wait ended. */
  http_status: number;
  task: { id: string; workspace_id: string; external_id?: string | null; creation_complete: boolean } & Record<
    string,
    unknown
  >;
  /** True when an earlier creation with the same external ID was found (nothing new was created). */
  deduplicated: boolean;
  creation_complete: boolean;
  operation_id: string;
}

/** A refusal with the API's stable code (`invalid_request`, `not_found`, `creation_aborted`, ...). */
export class TaskLedgerApiError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly code: string,
    readonly body: Record<string, unknown>,
  ) {
    super(`${code} (${httpStatus})${describe(body)}`);
    this.name = 'TaskLedgerApiError';
  }

  /** The offending field of a 400 (`/title`, `/external_id`, ...), if any. */
  get field(): string | undefined {
    const detail = this.body.detail as { field?: unknown } | undefined;
    return typeof detail?.field === 'string' ? detail.field : undefined;
  }
}

function describe(body: Record<string, unknown>): string {
  const detail = body.detail as { field?: unknown; message?: unknown } | undefined;
  if (!detail) return '';
  const parts = [detail.field, detail.message].filter((p) => typeof p === 'string');
  return parts.length > 0 ? `: ${parts.join(' ')}` : '';
}
