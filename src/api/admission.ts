/**
 * The admission-queue worker: producers that speak BullMQ enqueue a creation
 * request (`AdmissionJob`: `tokenId`, the REST create `body`, optional
 * `waitMs`, default 0) and get the REST answer as the job's outcome.
 *
 * - Accepted (200/202 as over REST): the job completes with `{http_status,
 *   task, deduplicated, creation_complete, operation_id}`, exactly the body
 *   of `POST /tasks` (commands/create.ts), after waiting up to `waitMs` for
 *   the creation to end.
 * - Refused (any 4xx: bad job shape, unknown or revoked token ID, bad
 *   request, another workspace, an aborted creation): the job fails with
 *   BullMQ's `UnrecoverableError` (never retried, whatever `attempts` the
 *   producer set) whose message is the REST error body plus `http_status`
 *   as JSON: the typed code is recorded on the job (`failedReason`).
 *   Validation runs before Begin writes, so a refused request wrote nothing.
 * - Anything else (5xx: the database or Redis failed) is thrown as is, so
 *   BullMQ retries it when the producer asked for attempts; retrying is safe
 *   with an external ID (the ledger finds the first creation).
 */
import Ajv from 'ajv';
import { UnrecoverableError, type Job } from 'bullmq';
import type { AdmissionJob } from '../../queues/names';
import type { CreateTaskFn } from '../coordinator/create-task';
import type { Db } from '../db/tx';
import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { Principal } from '../store/types';
import { principalForTokenId as tokenPrincipal } from '../store/actor';
import { isUuid } from './auth';
import { createTaskCommand } from './commands/create';
import { waitMsSchema } from './commands/schemas';
import { toHttpResponse } from './errors';
import { closed } from './validation';

export interface AdmissionDeps {
  db: Db;
  createTask: CreateTaskFn;
  metrics: Metrics;
  log: Logger;
}

export type AdmissionResult = { http_status: number } & Record<string, unknown>;

const { default: _noDefault, ...waitMsRange } = waitMsSchema;
const jobAjv = new Ajv({ allErrors: false, strict: true, coerceTypes: false, useDefaults: false });
/** The job's envelope; the create request inside it (`body`) is validated by Begin, as over REST. */
const validateJob = jobAjv.compile(
  closed({ tokenId: { type: 'string' }, body: {}, waitMs: waitMsRange }, ['tokenId', 'body']),
);

/** The principal of an API token (named by its ID, not its secret); null when unknown, revoked or not an ID. */
export async function principalForTokenId(db: Db, tokenId: string): Promise<Principal | null> {
  return isUuid(tokenId) ? tokenPrincipal(db, tokenId) : null;
}

function refuse(body: Record<string, unknown>): UnrecoverableError {
  return new UnrecoverableError(JSON.stringify(body));
}

export async function processAdmissionJob(
  deps: AdmissionDeps,
  job: Pick<Job, 'id' | 'data'>,
): Promise<AdmissionResult> {
  const data = job.data as unknown;
  if (!validateJob(data)) {
    const { status, body } = toHttpResponse({ validation: validateJob.errors }, deps.log);
    throw refuse({ http_status: status, ...body });
  }
  const { tokenId, body, waitMs } = data as AdmissionJob;
  const principal = await principalForTokenId(deps.db, tokenId);
  if (!principal) {
    deps.log.warn({ job_id: job.id }, 'admission job with an unknown or revoked token: refused');
    throw refuse({ http_status: 401, error: 'unauthorized' });
  }
  try {
    const res = await createTaskCommand({ deps, principal }, body, waitMs ?? 0);
    return { http_status: res.status, ...res.body };
  } catch (err) {
    const { status, body: errorBody } = toHttpResponse(err, deps.log);
    if (status < 500) throw refuse({ http_status: status, ...errorBody });
    throw err;
  }
}
