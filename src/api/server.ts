/**
 * `buildApi(deps)`: the Fastify instance serving the REST API (`/api/v1`),
 * health, readiness, Prometheus metrics, the ledger view (`/admin/ledger`,
 * admin/routes.ts) and the Bull Board dashboard (`/admin/queues`).
 * The caller owns its lifecycle (`listen`, `close`); nothing here starts
 * workers or opens connections.
 *
 * Every `/api/v1` route needs a bearer token (auth.ts); so does MCP's
 * streamable HTTP endpoint `POST /mcp` (src/mcp/http.ts). Errors map to HTTP
 * only in errors.ts. Each response is observed in
 * `taskledger_http_request_seconds{route,method,status}` under its route
 * pattern (never the raw URL, so IDs do not explode the label set).
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { adminRoutes } from './admin/routes';
import { installAuth } from './auth';
import type { ApiDeps } from './deps';
import { installErrorHandling } from './errors';
import { eventRoutes } from './routes/events';
import { externalIdRoutes } from './routes/external-id';
import { operationRoutes } from './routes/operations';
import { serviceRoutes } from './routes/service';
import { setupRoutes } from './routes/setup';
import { taskLifecycleRoutes } from './routes/task-lifecycle';
import { taskRoutes } from './routes/tasks';
import { workspaceDeletionRoutes } from './routes/workspace-deletion';
import { compileValidator } from './validation';
import { mcpRoutes } from '../mcp/http';

export type { ApiDeps } from './deps';

/** Why 1 MiB: a create request is at most a 64 KiB description plus bounded lists; attachments have their own 25 MiB limit. */
const JSON_BODY_LIMIT = 1024 * 1024;

export function buildApi(deps: ApiDeps): FastifyInstance {
  // pino's Logger is Fastify's logger; typing it as the base logger keeps the instance type plain.
  const logger: FastifyBaseLogger = deps.log;
  const app = Fastify({
    loggerInstance: logger,
    // Per-request lines would drown the ledger's own logs; the metrics histogram covers traffic.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
  });
  app.setValidatorCompiler(compileValidator);
  installErrorHandling(app, deps.log);

  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.httpRequests.observe(
      { route: request.routeOptions.url ?? 'unmatched', method: request.method, status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });

  void app.register(serviceRoutes(deps));
  void app.register(adminRoutes(deps));
  // MCP over streamable HTTP (src/mcp/http.ts): its own bearer check, JSON-RPC bodies.
  void app.register(mcpRoutes(deps));
  void app.register(
    async (api) => {
      installAuth(api, deps.db, deps.config.adminToken);
      // JSON only (attachments install their own raw parser): any other content type is 415.
      api.removeContentTypeParser('text/plain');
      await api.register(setupRoutes(deps));
      await api.register(taskRoutes(deps));
      await api.register(taskLifecycleRoutes(deps));
      await api.register(workspaceDeletionRoutes(deps));
      await api.register(externalIdRoutes(deps));
      await api.register(operationRoutes(deps));
      await api.register(eventRoutes(deps));
    },
    { prefix: '/api/v1' },
  );
  return app;
}
