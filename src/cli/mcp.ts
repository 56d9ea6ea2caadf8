/**
 * `taskledger mcp [--token T] [--roles a,b]`: an MCP server on stdio, for
 * an agent host that starts it as a subprocess. The token (flag, else
 * `TASKLEDGER_TOKEN`) is a workspace member token, an operator token or the
 * admin token; unknown or revoked, the command refuses to start (exit 1).
 * It runs no fleet role by default (a fleet elsewhere drives the
 * creations, as for an API process); `--roles` adds some to this process.
 * Logs go to stderr: stdout carries the protocol alone. Exits when the host
 * closes stdin or on SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { destination, pino } from 'pino';
import { bearerToken, principalForToken } from '../api/auth';
import { configFromEnv } from '../app/config';
import { startFleet } from '../fleet/fleet';
import { parseRoles, type Role } from '../fleet/roles';
import { buildMcpServer } from '../mcp/server';
import { EXIT } from './usage';

export async function mcpCommand(args: string[]): Promise<number> {
  let roles: Role[];
  let token: string | undefined;
  try {
    const { values } = parseArgs({
      args,
      options: { roles: { type: 'string' }, token: { type: 'string' } },
      strict: true,
    });
    roles = values.roles === undefined ? [] : parseRoles(values.roles);
    token = values.token ?? process.env.TASKLEDGER_TOKEN;
  } catch (err) {
    console.error(`taskledger mcp: ${(err as Error).message}`);
    return EXIT.USAGE;
  }
  if (!token) {
    console.error('taskledger mcp: a token is needed (--token or TASKLEDGER_TOKEN)');
    return EXIT.USAGE;
  }
  const log = pino({ name: 'taskledger-mcp', level: process.env.TASKLEDGER_LOG_LEVEL ?? 'info' }, destination(2));
  const fleet = await startFleet({
    config: configFromEnv(),
    roles: roles.filter((r) => r !== 'api'),
    log,
    poolSize: 4,
  });
  try {
    const principal = await principalForToken(
      fleet.db,
      fleet.apiDeps.config.adminToken,
      bearerToken(`Bearer ${token}`),
    );
    if (!principal) {
      console.error('taskledger mcp: unknown or revoked token');
      return EXIT.FAILED;
    }
    const server = buildMcpServer(fleet.apiDeps, principal, log);
    const closed = new Promise<void>((resolve) => {
      server.onclose = resolve;
      process.stdin.once('end', resolve);
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await server.connect(new StdioServerTransport());
    await closed;
    await server.close();
    return EXIT.OK;
  } finally {
    await fleet.stop();
  }
}
