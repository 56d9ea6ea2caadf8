/**
 * Helpers for the REST API tests: a real `buildApi` on the test database with
 * a fake `createTask` built on the real Store (Begin only: no workers run, so
 * a Created creation stays `preparing` and answers 202), a fresh metrics
 * registry, and small request helpers for `app.inject` and real HTTP.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll } from 'vitest';
import { buildApi } from '../../src/api/server';
import { DEFAULT_STAGED_TTL_MS, type AppConfig } from '../../src/app/config';
import type { CreateTaskFn, CreateTaskOutcome } from '../../src/coordinator/create-task';
import { dbConfigFromEnv } from '../../src/db/config';
import type { Db } from '../../src/db/tx';
import { silentLogger } from '../../src/log';
import { createMetrics, type Metrics } from '../../src/metrics';
import { beginTaskCreation } from '../../src/store/begin';

export function testConfig(dataDir: string, adminToken: string): AppConfig {
  return {
    db: dbConfigFromEnv(),
    redisUrl: process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379',
    port: 0,
    adminToken,
    dataDir,
    queuePrefix: 'taskledger-test',
    leaseMs: 30_000,
    sweepMs: 5_000,
    effectTimeoutMs: 15_000,
    stuckAfterMs: 600_000,
    stagedTtlMs: DEFAULT_STAGED_TTL_MS,
  };
}

/** Begin through the real Store; Created is `pending` (nobody drives the steps), found outcomes are `done`. */
export function storeCreateTask(db: Db, dataDir: string): CreateTaskFn {
  return async (principal, body) => {
    const r = await beginTaskCreation(db, principal, body, { dataDir });
    const outcome: CreateTaskOutcome = {
      status: r.outcome === 'Created' ? 'pending' : 'done',
      outcome: r.outcome,
      task: r.task,
      operationId: r.operationId,
      deduplicated: r.outcome === 'FoundSettled' || r.outcome === 'FoundUnsettled',
      creationComplete: r.task.creation_complete,
      abortCause: null,
    };
    return outcome;
  };
}

export interface TestApi {
  app: FastifyInstance;
  adminToken: string;
  dataDir: string;
  metrics: Metrics;
  /** Set once `listen()` ran (real HTTP). */
  baseUrl: string;
  /** Arguments the injected createTask saw (for the wait_ms mapping). */
  createCalls: { waitMs: number | undefined }[];
}

export interface ApiOptions {
  createTask?: (db: Db, dataDir: string) => CreateTaskFn;
  queues?: () => Queue[];
  listen?: boolean;
}

/** Builds one API per test file (before all) and closes it afterwards. */
export function useTestApi(holder: { readonly db: Db }, options: ApiOptions = {}): TestApi {
  const api = { createCalls: [] } as unknown as TestApi;
  beforeAll(async () => {
    api.adminToken = randomBytes(24).toString('base64url');
    api.dataDir = mkdtempSync(join(tmpdir(), 'taskledger-api-'));
    api.metrics = createMetrics();
    const inner = (options.createTask ?? storeCreateTask)(holder.db, api.dataDir);
    api.app = buildApi({
      db: holder.db,
      config: testConfig(api.dataDir, api.adminToken),
      log: silentLogger(),
      metrics: api.metrics,
      queues: options.queues?.(),
      createTask: (principal, body, opts) => {
        api.createCalls.push({ waitMs: opts?.waitMs });
        return inner(principal, body, opts);
      },
    });
    if (options.listen) {
      await api.app.listen({ port: 0, host: '127.0.0.1' });
      const addr = api.app.server.address();
      if (addr === null || typeof addr === 'string') throw new Error('no TCP address');
      api.baseUrl = `http://127.0.0.1:${addr.port}`;
    } else {
      await api.app.ready();
    }
  });
  afterAll(async () => {
    await api.app?.close();
  });
  return api;
}

export interface Res {
  status: number;
  body: any;
  text: string;
  headers: Record<string, unknown>;
}

/** `app.inject` with an optional bearer token and JSON body (or raw payload). */
export async function call(
  app: FastifyInstance,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  opts: { token?: string | null; body?: unknown; raw?: string | Buffer; contentType?: string } = {},
): Promise<Res> {
  const headers: Record<string, string> = {};
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let payload: string | Buffer | undefined;
  if (opts.raw !== undefined) {
    payload = opts.raw;
    headers['content-type'] = opts.contentType ?? 'application/json';
  } else if (opts.body !== undefined) {
    payload = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  const res = await app.inject({ method, url, headers, payload });
  let body: unknown = null;
  try {
    body = res.body ? JSON.parse(res.body) : null;
  } catch {
    body = null;
  }
  return { status: res.statusCode, body, text: res.body, headers: res.headers };
}

/** A real HTTP request against a listening API. */
export async function http(
  api: TestApi,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  opts: { token?: string; body?: unknown } = {},
): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = {};
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${api.baseUrl}${path}`, {
    method,
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}
