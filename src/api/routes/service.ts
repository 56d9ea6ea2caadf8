/**
 * Service routes (no `/api/v1` prefix).
 *
 * GET /healthz   200 while the process serves HTTP (no dependencies checked).
 * GET /readyz    200 when `SELECT 1` succeeds on the ledger database, else 503.
 * GET /metrics   Prometheus text of this process's registry (no auth: scrape
 *                targets are expected on a private network).
 * /admin/queues  Bull Board over the given BullMQ queues, operators only:
 *                `Authorization: Bearer` (API clients), or the ledger view's
 *                session cookie (admin/session.ts, set by the login form:
 *                no token in any URL). A browser without a session is sent
 *                to /admin/login; otherwise 401 without a valid token, 403
 *                for a member token. Each job links to its operation in the
 *                ledger view (`externalJobUrl`, from the job's
 *                `operationId`). Not mounted when no queues are given.
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Queue } from 'bullmq';
import { readRows } from '../../db/tx';
import { cookieValue, SESSION_COOKIE, sessionKeys, sessionPrincipal, type SessionKeys } from '../admin/session';
import { bearerToken, isOperator, isUuid, principalForToken } from '../auth';
import type { ApiDeps } from '../deps';
import { forbidden, sendError, unauthorized } from '../errors';

export const BOARD_PATH = '/admin/queues';
/** Answers refusals itself: Bull Board's plugin installs its own error handler, which would turn a throw into 500. */
function boardAuth(deps: ApiDeps, keys: SessionKeys) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const bearer = bearerToken(request.headers.authorization);
    const principal =
      bearer !== null
        ? await principalForToken(deps.db, deps.config.adminToken, bearer)
        : await sessionPrincipal(deps.db, keys, cookieValue(request.headers.cookie, SESSION_COOKIE), Date.now());
    if (!principal) {
      const browser = request.method === 'GET' && /text\/html/.test(request.headers.accept ?? '');
      if (browser && bearer === null) return reply.redirect('/admin/login', 303);
      return sendError(reply, unauthorized(), deps.log);
    }
    if (!isOperator(principal)) return sendError(reply, forbidden(), deps.log);
    return undefined;
  };
}

/** Bull Board's link from a job to its operation in the ledger view (job data carries `operationId`). */
export function ledgerLinkOf(job: { data?: unknown }): { displayText: string; href: string } {
  const data = (job.data ?? {}) as Record<string, unknown>;
  const op = data.operationId ?? data.creationOperationId;
  if (typeof op === 'string' && isUuid(op))
    return { displayText: 'Operation in the ledger view', href: `/admin/ledger/operations/${op}` };
  const ws = data.workspaceId;
  if (typeof ws === 'string' && isUuid(ws))
    return { displayText: 'Workspace in the ledger view', href: `/admin/ledger?workspace_id=${ws}` };
  return { displayText: 'Ledger view', href: '/admin/ledger' };
}

async function mountBoard(app: FastifyInstance, deps: ApiDeps, queues: Queue[]): Promise<void> {
  await app.register(async (scope) => {
    scope.addHook('onRequest', boardAuth(deps, sessionKeys(deps.config.adminToken)));
    const serverAdapter = new FastifyAdapter();
    serverAdapter.setBasePath(BOARD_PATH);
    // @bull-board/fastify pins its own copy of @bull-board/api types; the runtime contract is the same.
    type BoardAdapter = Parameters<typeof createBullBoard>[0]['serverAdapter'];
    createBullBoard({
      queues: queues.map((q) => new BullMQAdapter(q, { externalJobUrl: ledgerLinkOf })),
      serverAdapter: serverAdapter as unknown as BoardAdapter,
    });
    await scope.register(serverAdapter.registerPlugin(), { prefix: BOARD_PATH });
  });
}

export function serviceRoutes(deps: ApiDeps) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.get('/healthz', () => ({ status: 'ok' }));

    app.get('/readyz', async (_req, reply) => {
      try {
        await readRows(deps.db, 'SELECT 1 AS ok');
        return { status: 'ready' };
      } catch (err) {
        deps.log.warn({ err }, 'readiness check failed: database unreachable');
        return reply.status(503).send({ status: 'unavailable', error: 'database_unavailable' });
      }
    });

    app.get('/metrics', async (_req, reply) => {
      const text = await deps.metrics.registry.metrics();
      return reply.header('content-type', deps.metrics.registry.contentType).send(text);
    });

    if (deps.queues && deps.queues.length > 0) await mountBoard(app, deps, deps.queues);
  };
}
