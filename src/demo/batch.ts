/**
 * Sends the demo's create requests over HTTP, as a producer would: `POST
 * /api/v1/tasks?wait_ms=` with the member token, a few at a time, and
 * classifies each answer by the outcome table (design/API.md):
 * 200 Created / CreatedIdentityLost / FoundSettled / FoundUnsettled, 202
 * pending, 422 aborted, other 4xx rejected, 5xx or no answer an error.
 *
 * The webhook scenario is one sequence: the first delivery does not wait
 * (`wait_ms=0`, as a webhook receiver with a short timeout would), the first
 * retry follows at once, the others after the creation has ended. The
 * deferred task goes last; once it and its blocker are created, the blocker
 * is marked done (`POST /api/v1/tasks/:id/done`), which starts its agent.
 */
import type { BatchPlan, DemoRequest } from './scenarios';

export type ResponseKind =
  'Created' | 'CreatedIdentityLost' | 'FoundSettled' | 'FoundUnsettled' | 'pending' | 'aborted' | 'rejected' | 'error';

/** Where answers are counted as they arrive (progress.ts). */
export interface ProgressSink {
  record(kind: ResponseKind): void;
}

export interface RequestResult {
  request: DemoRequest;
  status: number | null;
  kind: ResponseKind;
  taskId: string | null;
  operationId: string | null;
  /** The error code and field of a refusal, or the transport failure. */
  error: string | null;
}

export interface ApiClient {
  baseUrl: string;
  token: string;
}

/** Why 4: enough to show creations overlapping (and the ledger's locks at work) without queueing on one Git repository. */
export const CONCURRENCY = 4;

/** Why 15 s on top of wait_ms: the API answers by its deadline; the margin only guards against a hung socket. */
const ANSWER_MARGIN_MS = 15_000;

type Json = Record<string, unknown>;

function classify(status: number, body: Json, request: DemoRequest): ResponseKind {
  if (status === 200) {
    if (body.deduplicated === true) return body.creation_complete === true ? 'FoundSettled' : 'FoundUnsettled';
    const task = (body.task ?? {}) as Json;
    const asked = typeof request.body.external_id === 'string';
    return asked && !('external_id' in task) ? 'CreatedIdentityLost' : 'Created';
  }
  if (status === 202) return 'pending';
  if (status === 422 && body.error === 'creation_aborted') return 'aborted';
  if (status >= 400 && status < 500) return 'rejected';
  return 'error';
}

function errorText(body: Json): string | null {
  if (typeof body.error !== 'string') return null;
  const detail = (body.detail ?? {}) as Json;
  const field = typeof detail.field === 'string' ? ` at ${detail.field}` : '';
  const cause = typeof body.cause === 'string' ? ` (${body.cause})` : '';
  return `${body.error}${field}${cause}`;
}

export async function sendCreate(api: ApiClient, request: DemoRequest): Promise<RequestResult> {
  const result: RequestResult = { request, status: null, kind: 'error', taskId: null, operationId: null, error: null };
  try {
    const res = await fetch(`${api.baseUrl}/api/v1/tasks?wait_ms=${request.waitMs}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${api.token}` },
      body: JSON.stringify(request.body),
      signal: AbortSignal.timeout(request.waitMs + ANSWER_MARGIN_MS),
    });
    const text = await res.text();
    let body: Json = {};
    try {
      body = JSON.parse(text) as Json;
    } catch {
      body = { error: `non-JSON answer: ${text.slice(0, 80)}` };
    }
    result.status = res.status;
    result.kind = classify(res.status, body, request);
    const task = (body.task ?? {}) as Json;
    result.taskId = typeof task.id === 'string' ? task.id : null;
    const detail = (body.detail ?? {}) as Json;
    const op = body.operation_id ?? detail.operation_id;
    result.operationId = typeof op === 'string' ? op : null;
    if (result.kind === 'rejected' || result.kind === 'aborted' || result.kind === 'error')
      result.error = errorText(body);
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
  }
  return result;
}

async function operationState(api: ApiClient, operationId: string): Promise<string | null> {
  const res = await fetch(`${api.baseUrl}/api/v1/creation-operations/${operationId}`, {
    headers: { authorization: `Bearer ${api.token}` },
    signal: AbortSignal.timeout(ANSWER_MARGIN_MS),
  });
  if (!res.ok) return null;
  const body = (await res.json()) as Json;
  return typeof body.state === 'string' ? body.state : null;
}

/** Polls the operation over REST until it completed or aborted, or `timeoutMs` passed. */
async function waitForOperation(api: ApiClient, operationId: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const state = await operationState(api, operationId);
    if (state === 'completed' || state === 'aborted') return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Runs `fn` over `items` with at most `limit` in flight; results keep the input order. */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

export interface BatchResults {
  tasks: RequestResult[];
  faults: RequestResult[];
  webhook: RequestResult[];
  /** `POST /tasks/:blocker/done` for the deferred task's blocker; null when the deferred task was not created. */
  done: DoneResult | null;
}

export interface DoneResult {
  blockerId: string;
  status: number | null;
  /** The tasks the answer says it unblocked. */
  resolved: string[];
  error: string | null;
}

/** Marks a task done over REST (the deferred start's trigger). */
export async function markDone(api: ApiClient, taskId: string): Promise<DoneResult> {
  const result: DoneResult = { blockerId: taskId, status: null, resolved: [], error: null };
  try {
    const res = await fetch(`${api.baseUrl}/api/v1/tasks/${taskId}/done`, {
      method: 'POST',
      headers: { authorization: `Bearer ${api.token}` },
      signal: AbortSignal.timeout(ANSWER_MARGIN_MS),
    });
    const body = (await res.json()) as Json;
    result.status = res.status;
    if (Array.isArray(body.dependencies_resolved)) result.resolved = body.dependencies_resolved.map(String);
    result.error = errorText(body);
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
  }
  return result;
}

/** The number of HTTP requests `runBatch` sends for a plan. */
export function requestCount(plan: BatchPlan): number {
  return plan.tasks.length + (plan.deferred ? 1 : 0) + plan.faults.length + plan.webhook.deliveries;
}

export async function runBatch(api: ApiClient, plan: BatchPlan, progress: ProgressSink): Promise<BatchResults> {
  const send = async (request: DemoRequest): Promise<RequestResult> => {
    const r = await sendCreate(api, request);
    progress.record(r.kind);
    return r;
  };
  const webhookRequest = (n: number): DemoRequest => ({
    label: n === 0 ? 'webhook delivery' : `webhook retry ${n}`,
    fault: n > 0,
    expect: n === 0 ? 'complete' : 'observe',
    waitMs: n === 0 ? 0 : 3_000,
    body: plan.webhook.body,
  });
  const webhook = async (): Promise<RequestResult[]> => {
    const first = await send(webhookRequest(0));
    const out = [first, await send(webhookRequest(1))];
    if (first.operationId) await waitForOperation(api, first.operationId, 20_000);
    for (let n = 2; n < plan.webhook.deliveries; n++) out.push(await send(webhookRequest(n)));
    return out;
  };

  type Job = { kind: 'one'; request: DemoRequest } | { kind: 'webhook' };
  const jobs: Job[] = [
    ...plan.tasks.map((request): Job => ({ kind: 'one', request })),
    { kind: 'webhook' },
    ...plan.faults.map((request): Job => ({ kind: 'one', request })),
  ];
  const answers = await pool<Job, RequestResult | RequestResult[]>(jobs, CONCURRENCY, (job) =>
    job.kind === 'one' ? send(job.request) : webhook(),
  );
  const flat = answers.filter((d): d is RequestResult => !Array.isArray(d));
  const tasks = flat.filter((r) => !r.request.fault);
  const faults = flat.filter((r) => r.request.fault);
  const webhookResults = answers.find((d): d is RequestResult[] => Array.isArray(d)) ?? [];

  // The deferred task needs its blocker to exist: the first ordinary task, whatever its state. Once both are
  // created, the blocker is marked done: that resolves the deferred task, and its agent starts.
  let done: DoneResult | null = null;
  if (plan.deferred) {
    const blocker = tasks[0];
    if (blocker?.taskId) {
      const deferred = await send(plan.deferred(blocker.taskId));
      tasks.push(deferred);
      if (deferred.taskId && deferred.operationId && blocker.operationId) {
        // The blocker must be created to be marked done (409 otherwise); waiting for the deferred task too makes the
        // answer name it as unblocked now, rather than as resolved later by its own Complete.
        await waitForOperation(api, blocker.operationId, 20_000);
        await waitForOperation(api, deferred.operationId, 20_000);
        done = await markDone(api, blocker.taskId);
      }
    } else {
      const request = plan.deferred('00000000-0000-4000-8000-000000000000');
      tasks.push({
        request,
        status: null,
        kind: 'error',
        taskId: null,
        operationId: null,
        error: 'its blocker (task 1) has no task ID: not sent',
      });
      progress.record('error');
    }
  }
  return { tasks, faults, webhook: webhookResults, done };
}
