/**
 * Service routes (no `/api/v1` prefix).
 *
 * GET /healthz   200 while the process serves HTTP (no dependencies checked).
 * GET /readyz    200 when `SELECT 1` succeeds on the ledger database, else 503.
 * GET /metrics   Prometheus text of this process's registry (no auth: scrape
 *                targets are expected on a private network).
 * /admin/queues  Bull Board over the given BullMQ queues, operators only:
 *                `Authorization: Bearer`, or `?token=` for a browser, which
 *                then gets an HttpOnly, SameSite=Strict cookie scoped to
 *                `/admin/queues` so the dashboard's own asset and API calls
 *                are authorized too. 401 without a valid token, 403 for a
 *                member token. Not mounted when no queues are given.
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Queue } from 'bullmq';
import { readRows } from '../../db/tx';
import { bearerToken, isOperator, principalForToken } from '../auth';
import type { ApiDeps } from '../deps';
import { forbidden, sendError, unauthorized } from '../errors';

export const BOARD_PATH = '/admin/queues';
const BOARD_COOKIE = 'taskledger_board';

function cookieValue(header: string | undefined, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        return decodeURIComponent(part.slice(eq + 1).trim());
      } catch {
        return null;
      }
    }
  }
  return null;
}

/** Answers refusals itself: Bull Board's plugin installs its own error handler, which would turn a throw into 500. */
function boardAuth(deps: ApiDeps) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const query = request.query as Record<string, unknown> | undefined;
    const fromQuery = typeof query?.token === 'string' ? query.token : null;
    const token =
      bearerToken(request.headers.authorization) ?? fromQuery ?? cookieValue(request.headers.cookie, BOARD_COOKIE);
    const principal = await principalForToken(deps.db, deps.config.adminToken, token);
    if (!principal) return sendError(reply, unauthorized(), deps.log);
    if (!isOperator(principal)) return sendError(reply, forbidden(), deps.log);
    if (fromQuery !== null && token === fromQuery) {
      reply.header(
        'set-cookie',
        `${BOARD_COOKIE}=${encodeURIComponent(fromQuery)}; Path=${BOARD_PATH}; HttpOnly; SameSite=Strict`,
      );
    }
    return undefined;
  };
}

async function mountBoard(app: FastifyInstance, deps: ApiDeps, queues: Queue[]): Promise<void> {
  await app.register(async (scope) => {
    scope.addHook('onRequest', boardAuth(deps));
    const serverAdapter = new FastifyAdapter();
    serverAdapter.setBasePath(BOARD_PATH);
    // @bull-board/fastify pins its own copy of @bull-board/api types; the runtime contract is the same.
    type BoardAdapter = Parameters<typeof createBullBoard>[0]['serverAdapter'];
    createBullBoard({
      queues: queues.map((q) => new BullMQAdapter(q)),
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
