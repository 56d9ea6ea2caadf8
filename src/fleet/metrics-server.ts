/**
 * `GET /metrics` for a process that runs no `api` role (`TASKLEDGER_METRICS_PORT`): the counters its roles keep
 * (step results, launches, deliveries, reconciliations, stuck operations) in Prometheus text, on 127.0.0.1 like
 * the API. Plain `node:http`, one route: a worker-only process does not load Fastify (~13 MB resident, fleet.ts).
 * Any other path or method is 404. Reads nothing but the in-process registry.
 */
import { createServer, type Server } from 'node:http';
import type { Metrics } from '../metrics';

/** Listens on 127.0.0.1:`port` (0 picks a free one) and resolves once listening; `close()` it to stop. */
export function serveMetrics(metrics: Metrics, port: number): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}');
      return;
    }
    metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      () => res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"internal"}'),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
