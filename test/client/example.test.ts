/**
 * examples/producer.ts runs as documented (a subprocess through tsx, importing
 * `taskledger/client` by its package name) against a real fleet: a REST
 * creation, a queued one, and the typed refusal of bad queued input.
 * Both dialects.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { count, useTestDb } from '../support/db';
import { useWorld, type FleetWorld } from '../fleet/support';

const run = promisify(execFile);
const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

describe('examples/producer.ts', () => {
  it('creates over REST and through the admission queue, and prints the typed refusal', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/producer.ts'], {
      env: {
        ...process.env,
        TASKLEDGER_URL: w.baseUrl,
        TASKLEDGER_TOKEN: w.ws.token,
        TASKLEDGER_TOKEN_ID: w.ws.member.authority_id,
        TASKLEDGER_WORKSPACE_ID: w.ws.workspaceId,
        TASKLEDGER_REDIS_URL: w.config.redisUrl,
        TASKLEDGER_QUEUE_PREFIX: w.config.queuePrefix,
      },
    });
    expect(stdout).toMatch(/^REST: 200 [0-9a-f-]{36}/m);
    expect(stdout).toMatch(/^queue: 200 [0-9a-f-]{36}/m);
    expect(stdout).toContain('refused: invalid_request /colour');
    expect(await count(t.db, 'tasks', "workspace_id = ? AND external_id LIKE 'example-%'", [w.ws.workspaceId])).toBe(2);
  });
});
