/**
 * A process without the `api` role serves its own counters at `GET /metrics` on `TASKLEDGER_METRICS_PORT`
 * (src/fleet/metrics-server.ts): a fleet split by role (the pm2 file) can then be scraped process by process.
 * Unset, such a process listens on nothing; with the API role, `/metrics` stays the API's. Both dialects.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { configFromEnv } from '../../src/app/config';
import { startFleet, type Fleet } from '../../src/fleet/fleet';
import { silentLogger } from '../../src/log';
import { deleteQueuePrefix } from '../../src/runtime/redis';
import { useTestDb } from '../support/db';

useTestDb();

async function withFleet(
  roles: Parameters<typeof startFleet>[0]['roles'],
  metricsPort: number | undefined,
  fn: (fleet: Fleet) => Promise<void>,
): Promise<void> {
  const config = {
    ...configFromEnv(),
    port: 0,
    queuePrefix: `tl-test-${randomUUID().slice(0, 8)}`,
    ...(metricsPort === undefined ? {} : { metricsPort }),
  };
  try {
    const fleet = await startFleet({ config, roles, log: silentLogger(), poolSize: 2 });
    try {
      await fn(fleet);
    } finally {
      await fleet.stop();
    }
  } finally {
    await deleteQueuePrefix(config.redisUrl, config.queuePrefix);
  }
}

describe('metrics of a process without the API', () => {
  it('serves its own registry at /metrics on the configured port, and 404 elsewhere', async () => {
    await withFleet(['steps', 'complete'], 0, async (fleet) => {
      expect(fleet.api).toBeNull();
      const port = (fleet.metricsServer!.address() as AddressInfo).port;
      fleet.metrics.stepResults.inc({ kind: 'session_prepare', state: 'succeeded' }, 3);
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('text/plain');
      const text = await res.text();
      expect(text).toContain('taskledger_step_results_total{kind="session_prepare",state="succeeded"} 3');
      expect(text).toContain('# TYPE process_cpu_user_seconds_total counter');
      expect((await fetch(`http://127.0.0.1:${port}/api/v1/tasks`)).status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })).status).toBe(404);
    });
  });

  it('listens on nothing without a port, and leaves /metrics to the API when it runs', async () => {
    await withFleet(['steps'], undefined, async (fleet) => {
      expect(fleet.metricsServer).toBeNull();
    });
    await withFleet(['api'], 0, async (fleet) => {
      expect(fleet.metricsServer).toBeNull();
      const port = (fleet.api!.server.address() as AddressInfo).port;
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(200);
    });
  });

  it('a taken port fails the start with its name, and leaves nothing running', async () => {
    await withFleet(['steps'], 0, async (first) => {
      const taken = (first.metricsServer!.address() as AddressInfo).port;
      await expect(withFleet(['complete'], taken, () => Promise.resolve())).rejects.toThrow(
        `TASKLEDGER_METRICS_PORT ${taken} on 127.0.0.1 is already in use`,
      );
    });
  });

  it('reads TASKLEDGER_METRICS_PORT as a positive integer, unset meaning none', () => {
    expect(configFromEnv({ TASKLEDGER_METRICS_PORT: '9464' }).metricsPort).toBe(9464);
    expect(configFromEnv({}).metricsPort).toBeUndefined();
    expect(configFromEnv({ TASKLEDGER_METRICS_PORT: ' ' }).metricsPort).toBeUndefined();
    expect(() => configFromEnv({ TASKLEDGER_METRICS_PORT: 'ninety' })).toThrow(
      'TASKLEDGER_METRICS_PORT must be a positive integer (got "ninety")',
    );
  });
});
