/**
 * `buildMcpServer(deps, principal)`: one MCP server (the SDK's low-level
 * `Server`, so tools carry our JSON Schemas as they are) bound to the
 * principal its transport authenticated: stdio (`taskledger mcp`, the token
 * from the environment or a flag) or streamable HTTP (`POST /mcp`, a bearer
 * token per request, `./http.ts`). `tools/list` lists `./tools.ts`;
 * `tools/call` validates the arguments, runs the command and answers a
 * result or a tool error carrying the REST error body (`./results.ts`).
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { ApiDeps } from '../api/deps';
import type { Logger } from '../log';
import type { Principal } from '../store/types';
import { errorResult, invalidArguments, successResult, unknownTool } from './results';
import { TOOLS, TOOLS_BY_NAME } from './tools';

export const MCP_SERVER_NAME = 'taskledger';
export const MCP_SERVER_VERSION = '0.1.0';

export function buildMcpServer(deps: ApiDeps, principal: Principal, log: Logger): Server {
  const server = new Server({ name: MCP_SERVER_NAME, version: MCP_SERVER_VERSION }, { capabilities: { tools: {} } });
  const ctx = { deps, principal, log };
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: TOOLS.map((t): Tool => ({
      name: t.name,
      description: t.description,
      inputSchema: t.inputSchema as Tool['inputSchema'],
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
    const def = TOOLS_BY_NAME.get(request.params.name);
    if (!def) return unknownTool(request.params.name);
    // A copy: ajv fills defaults in place.
    const args = structuredClone(request.params.arguments ?? {});
    if (!def.validate(args)) return invalidArguments(def.validate.errors ?? [], log);
    try {
      const { status, body } = await def.run(ctx, args);
      return successResult(status, body ?? {});
    } catch (err) {
      return errorResult(err, log);
    }
  });
  return server;
}
