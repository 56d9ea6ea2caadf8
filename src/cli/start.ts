/**
 * `taskledger start [--roles a,b,...]`: runs the selected fleet roles in this
 * process until SIGINT/SIGTERM, then stops gracefully (workers finish or their
 * leases expire; the ledger, not this process, decides what runs again).
 * `TASKLEDGER_SWEEP_WORKSPACE_ID` limits the reaper's sweep to one workspace.
 */
import { parseArgs } from 'node:util';
import { configFromEnv } from '../app/config';
import { startFleet } from '../fleet/fleet';
import { parseRoles } from '../fleet/roles';
import { createLogger } from '../log';
import { EXIT } from './usage';

export async function startCommand(args: string[]): Promise<number> {
  let roles;
  try {
    const { values } = parseArgs({ args, options: { roles: { type: 'string' } }, strict: true });
    roles = parseRoles(values.roles);
  } catch (err) {
    console.error(`taskledger start: ${(err as Error).message}`);
    return EXIT.USAGE;
  }
  const log = createLogger();
  // Scopes this process's reaper to one workspace (a per-tenant reaper; crash tests sharing a database).
  const sweepWorkspaceId = process.env.TASKLEDGER_SWEEP_WORKSPACE_ID?.trim() || undefined;
  const fleet = await startFleet({
    config: configFromEnv(),
    roles,
    log,
    ...(sweepWorkspaceId === undefined ? {} : { sweepWorkspaceId }),
  });
  if (fleet.api) {
    const addr = fleet.api.server.address();
    if (addr && typeof addr === 'object')
      log.info(
        `REST API on http://127.0.0.1:${addr.port}/api/v1 (ledger view /admin/ledger, queues /admin/queues, metrics /metrics)`,
      );
  }
  const metricsAddr = fleet.metricsServer?.address();
  if (metricsAddr && typeof metricsAddr === 'object')
    log.info(`metrics on http://127.0.0.1:${metricsAddr.port}/metrics`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('stopping');
  await fleet.stop();
  return EXIT.OK;
}
