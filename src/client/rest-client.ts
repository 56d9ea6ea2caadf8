/**
 * `TaskLedgerClient`: a typed REST client for producers.
 *
 * `createTask(request, {waitMs})` posts the request and returns the answer
 * (200 or 202, see `CreateTaskAnswer`); a refusal throws
 * `TaskLedgerApiError` with the API's code. When the answer is lost (a
 * network error, or 502/503/504 from the API or a proxy in front of it) and
 * the request carries an `external_id`, it posts the same request again
 * (up to `retries` times, waiting `retryDelayMs` doubling): the ledger finds
 * the creation the lost answer belonged to (`deduplicated: true`), so a
 * retry never creates a second task. Without an external ID a lost answer is
 * thrown, since a retry could create a duplicate.
 * `findByExternalId`, `getTask` and `getOperation` read the rest.
 */
import type { CreateTaskAnswer, CreateTaskRequest } from './types';
import { TaskLedgerApiError } from './types';

export interface TaskLedgerClientOptions {
  /** The API's base URL, e.g. `http://127.0.0.1:8080` (without `/api/v1`). */
  baseUrl: string;
  /** A workspace member token (or an operator token). */
  token: string;
  /** Re-posts after a lost answer, only for requests with an external ID (default 3). */
  retries?: number;
  /** First wait between re-posts, doubled each time (default 200 ms). */
  retryDelayMs?: number;
  fetch?: typeof fetch;
}

const LOST_ANSWER_STATUSES = new Set([502, 503, 504]);

/** Thrown by `request` when no answer came back (the connection failed). */
class LostAnswer extends Error {}

export class TaskLedgerClient {
  private readonly baseUrl: string;
  private readonly fetchFn: typeof fetch;

  constructor(private readonly options: TaskLedgerClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetchFn = options.fetch ?? fetch;
  }

  async createTask(request: CreateTaskRequest | Record<string, unknown>, opts: { waitMs?: number } = {}) {
    const query = opts.waitMs === undefined ? '' : `?wait_ms=${opts.waitMs}`;
    const retryable = typeof (request as { external_id?: unknown }).external_id === 'string';
    const retries = retryable ? (this.options.retries ?? 3) : 0;
    let delay = this.options.retryDelayMs ?? 200;
    for (let attempt = 0; ; attempt++) {
      try {
        const { status, body } = await this.request('POST', `/tasks${query}`, request);
        if (LOST_ANSWER_STATUSES.has(status) && attempt < retries) throw new LostAnswer(`HTTP ${status}`);
        return this.answer<CreateTaskAnswer>(status, body);
      } catch (err) {
        if (!(err instanceof LostAnswer) || attempt >= retries) throw err;
      }
      await new Promise((r) => setTimeout(r, delay));
      delay *= 2;
    }
  }

  /** The task holding `externalId` in the workspace, even while it is still being created. */
  async findByExternalId(workspaceId: string, externalId: string) {
    const { status, body } = await this.request(
      'GET',
      `/workspaces/${encodeURIComponent(workspaceId)}/tasks/by-external-id?external_id=${encodeURIComponent(externalId)}`,
    );
    return this.answer<{ http_status: number; task: CreateTaskAnswer['task']; creation_complete: boolean }>(
      status,
      body,
    );
  }

  async getTask(taskId: string) {
    const { status, body } = await this.request('GET', `/tasks/${encodeURIComponent(taskId)}`);
    return this.answer<{ http_status: number; task: CreateTaskAnswer['task'] }>(status, body);
  }

  async getOperation(operationId: string) {
    const { status, body } = await this.request('GET', `/creation-operations/${encodeURIComponent(operationId)}`);
    return this.answer<{ http_status: number; id: string; state: string } & Record<string, unknown>>(status, body);
  }

  private answer<T>(status: number, body: Record<string, unknown>): T {
    if (status >= 400)
      throw new TaskLedgerApiError(status, typeof body.error === 'string' ? body.error : 'http_error', body);
    return { http_status: status, ...body } as T;
  }

  private async request(
    method: string,
    path: string,
    json?: unknown,
  ): Promise<{ status: number; body: Record<string, unknown> }> {
    let res: Response;
    try {
      res = await this.fetchFn(`${this.baseUrl}/api/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.options.token}`,
          ...(json === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: json === undefined ? undefined : JSON.stringify(json),
      });
    } catch (err) {
      throw new LostAnswer(`no answer from ${this.baseUrl}: ${(err as Error).message}`, { cause: err });
    }
    let body: Record<string, unknown> = {};
    try {
      const text = await res.text();
      body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
    } catch (err) {
      // The answer was cut off after the status line: as lost as no answer at all.
      if (res.status < 400) throw new LostAnswer(`truncated answer: ${(err as Error).message}`, { cause: err });
    }
    return { status: res.status, body };
  }
}
