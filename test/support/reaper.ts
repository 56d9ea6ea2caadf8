/**
 * A reaper's dependencies for tests that drive `sweepOnce` directly: the
 * test database, the workspace's data directory, the default step handlers
 * and provider registry, a silent log, no queues unless given.
 */
import type { Db } from '../../src/db/tx';
import { defaultStepHandlers } from '../../src/kinds/registry';
import { silentLogger } from '../../src/log';
import { createProviderRegistry } from '../../src/providers/registry';
import type { ReaperDeps } from '../../src/runtime/reaper';

export function testReaper(
  db: Db,
  ws: { dataDir: string; workspaceId: string },
  actor: string,
  more: Partial<ReaperDeps> = {},
): ReaperDeps {
  return {
    effects: {
      db,
      dataDir: ws.dataDir,
      providers: createProviderRegistry({ timeoutMs: 3000 }),
      log: silentLogger(),
      timeoutMs: 3000,
    },
    handlers: defaultStepHandlers,
    queues: null,
    log: silentLogger(),
    actor,
    workspaceId: ws.workspaceId,
    ...more,
  };
}
