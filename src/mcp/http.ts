/**
 * Streamable HTTP for MCP on the API port: `POST /mcp` with
 * `Authorization: Bearer <token>` (a workspace member token, an operator
 * token or the admin token; the same rule as `/api/v1`). Stateless: each
 * request gets its own server bound to that request's principal and JSON
 * answers (no session, no server-sent stream), so any API process can serve
 * any request. Missing or unknown token: 401 `{error:"unauthorized"}`
 * before the body is read. `GET`/`DELETE /mcp` (session streams) are 405.
 */
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyPluginCallback } from 'fastify';
import { bearerToken, principalForToken } from '../api/auth';
import type { ApiDeps } from '../api/deps';
import { unauthorized } from '../api/errors';
import type { Principal } from '../store/types';
import { buildMcpServer } from './server';

declare module 'fastify' {
  interface FastifyRequest {
    mcpPrincipal?: Principal;
  }
}

const notAllowed = {
  jsonrpc: '2.0',
  error: { code: -32000, message: 'Method not allowed: this MCP endpoint is stateless, use POST' },
  id: null,
};

export function mcpRoutes(deps: ApiDeps): FastifyPluginCallback {
  return function routes(app, _opts, done): void {
    app.post(
      '/mcp',
      {
        onRequest: async (req) => {
          const principal = await principalForToken(
            deps.db,
            deps.config.adminToken,
            bearerToken(req.headers.authorization),
          );
          if (!principal) throw unauthorized();
          req.mcpPrincipal = principal;
        },
      },
      async (req, reply) => {
        const server = buildMcpServer(deps, req.mcpPrincipal!, deps.log);
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: true,
        });
        reply.hijack();
        reply.raw.on('close', () => {
          void transport.close();
          void server.close();
        });
        try {
          await server.connect(transport);
          await transport.handleRequest(req.raw, reply.raw, req.body);
        } catch (err) {
          // The reply is hijacked: Fastify's error handler cannot answer, so the JSON-RPC error is written here.
          deps.log.error({ err }, 'MCP request failed');
          if (!reply.raw.headersSent) {
            reply.raw.writeHead(500, { 'content-type': 'application/json' });
            reply.raw.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'internal' }, id: null }));
          }
        }
      },
    );
    for (const method of ['GET', 'DELETE'] as const) {
      app.route({ method, url: '/mcp', handler: (_req, reply) => reply.status(405).send(notAllowed) });
    }
    done();
  };
}
