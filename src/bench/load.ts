/**
 * Load generation against the REST API: `POST /api/v1/tasks?wait_ms=...`,
 * whose response arrives when the creation completed (`task.created` is
 * committed) — so the request's round trip is the request-to-`task.created`
 * latency. Two drivers:
 *
 * - `closedLoop`: N creations, C in flight (each finished request starts the
 *   next); throughput = creations / wall time.
 * - `pacedLoop`: an open loop at a fixed rate for a fixed time. Latency is
 *   measured from each request's *scheduled* start, so a late send (the
 *   bench itself stalled) counts against the result instead of hiding it.
 */
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';

export interface Sample {
  /** Scheduled (paced) or actual (closed loop) start, epoch ms with sub-ms precision. */
  startEpochMs: number;
  latencyMs: number;
  status: number;
  taskId: string | null;
  /** 200 with `creation_complete: true`. */
  ok: boolean;
  error: string | null;
}

export interface ApiClient {
  create(body: unknown): Promise<{ status: number; json: Record<string, unknown> | null; error: string | null }>;
  close(): void;
}

/** Why 30 s: far above any healthy creation, even queued behind a full closed loop on two busy cores;
 *  a creation still pending then (202) is a failure of the run, and a stuck one holds its lane no longer. */
export const BENCH_WAIT_MS = 30_000;

export function apiClient(baseUrl: string, token: string, maxSockets: number): ApiClient {
  const agent = new Agent({ keepAlive: true, maxSockets });
  const url = new URL(`/api/v1/tasks?wait_ms=${BENCH_WAIT_MS}`, baseUrl);
  return {
    create(body) {
      const payload = Buffer.from(JSON.stringify(body));
      return new Promise((resolve) => {
        const req = request(
          url,
          {
            method: 'POST',
            agent,
            headers: {
              'content-type': 'application/json',
              'content-length': payload.length,
              authorization: `Bearer ${token}`,
            },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => {
              let json: Record<string, unknown> | null = null;
              try {
                json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
              } catch {
                json = null;
              }
              resolve({ status: res.statusCode ?? 0, json, error: null });
            });
            res.on('error', (err) => resolve({ status: 0, json: null, error: err.message }));
          },
        );
        req.on('error', (err) => resolve({ status: 0, json: null, error: err.message }));
        req.end(payload);
      });
    },
    close() {
      agent.destroy();
    },
  };
}

const epochNow = () => performance.timeOrigin + performance.now();

async function one(client: ApiClient, body: unknown, startEpochMs: number, startHr: number): Promise<Sample> {
  const res = await client.create(body);
  const latencyMs = performance.now() - startHr;
  const task = res.json?.task as { id?: string } | undefined;
  const ok = res.status === 200 && res.json?.creation_complete === true;
  let error = res.error;
  if (!ok && error === null) error = `HTTP ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`;
  return { startEpochMs, latencyMs, status: res.status, taskId: task?.id ?? null, ok, error };
}

export interface LoopProgress {
  (done: number, samples: readonly Sample[], inFlight: number): void;
}

export async function closedLoop(
  client: ApiClient,
  total: number,
  concurrency: number,
  bodyOf: (i: number) => unknown,
  onProgress?: LoopProgress,
): Promise<{ samples: Sample[]; wallMs: number }> {
  const samples: Sample[] = [];
  let next = 0;
  let inFlight = 0;
  const started = performance.now();
  const lane = async () => {
    while (next < total) {
      const i = next++;
      inFlight++;
      const s = await one(client, bodyOf(i), epochNow(), performance.now());
      inFlight--;
      samples.push(s);
      onProgress?.(samples.length, samples, inFlight);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, lane));
  return { samples, wallMs: performance.now() - started };
}

/**
 * Why stop on a backlog: an open loop against a fleet slower than the rate
 * only queues, and every later latency measures the queue. Once the requests
 * in flight exceed `backlogSeconds` worth of arrivals, the run stops sending
 * (the target is missed by then anyway), lets the sent ones finish, and says
 * it was overloaded.
 */
export async function pacedLoop(
  client: ApiClient,
  rate: number,
  seconds: number,
  bodyOf: (i: number) => unknown,
  onProgress?: LoopProgress,
  backlogSeconds = 2,
): Promise<{ samples: Sample[]; wallMs: number; planned: number; sent: number; overloaded: boolean }> {
  const planned = Math.max(1, Math.round(rate * seconds));
  const intervalMs = 1000 / rate;
  const maxInFlight = Math.max(10, Math.ceil(rate * backlogSeconds));
  const samples: Sample[] = [];
  const pending: Promise<void>[] = [];
  let inFlight = 0;
  let sent = 0;
  let overloaded = false;
  const t0 = performance.now() + 20;
  for (let i = 0; i < planned; i++) {
    const at = t0 + i * intervalMs;
    const wait = at - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    if (inFlight >= maxInFlight) {
      overloaded = true;
      break;
    }
    inFlight++;
    sent++;
    const startEpochMs = performance.timeOrigin + at;
    pending.push(
      one(client, bodyOf(i), startEpochMs, at).then((s) => {
        inFlight--;
        samples.push(s);
        onProgress?.(samples.length, samples, inFlight);
      }),
    );
  }
  await Promise.all(pending);
  return { samples, wallMs: performance.now() - t0, planned, sent, overloaded };
}
