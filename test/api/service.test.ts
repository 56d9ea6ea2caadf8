/**
 * Service routes: health, readiness (including a dead database), Prometheus
 * metrics, and the Bull Board dashboard behind the operator token (real
 * BullMQ queue on the real Redis, with a per-run key prefix).
 */
import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApi } from '../../src/api/server';
import { dbConfigFromEnv } from '../../src/db/config';
import { createDataSource } from '../../src/db/data-source';
import { silentLogger } from '../../src/log';
import { createMetrics } from '../../src/metrics';
import { useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { ledgerLinkOf } from '../../src/api/routes/service';
import { call, http, storeCreateTask, testConfig, useTestApi } from './helpers';

const t = useTestDb();
const redis = new Redis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
const queueName = `board-test-${randomUUID().slice(0, 8)}`;
const prefix = `taskledger-test-${randomUUID().slice(0, 8)}`;
const queue = new Queue(queueName, { connection: redis, prefix });
const api = useTestApi(t, { listen: true, queues: () => [queue] });

afterAll(async () => {
  await queue.obliterate({ force: true }).catch(() => undefined);
  await queue.close();
  await redis.quit();
});

describe('health, readiness and metrics', () => {
  it('healthz is 200; readyz is 200 with the database and 503 without it', async () => {
    expect(await http(api, 'GET', '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    expect((await http(api, 'GET', '/readyz')).status).toBe(200);

    const cfg = dbConfigFromEnv();
    const deadUrl =
      cfg.dialect === 'postgres' ? 'postgres://postgres@127.0.0.1:1/none' : 'mysql://root@127.0.0.1:1/none';
    const dead = { ds: createDataSource({ url: deadUrl, dialect: cfg.dialect }), dialect: cfg.dialect };
    const app = buildApi({
      db: dead,
      config: testConfig(api.dataDir, 'x'),
      log: silentLogger(),
      metrics: createMetrics(),
      createTask: storeCreateTask(dead, api.dataDir),
    });
    try {
      const res = await call(app, 'GET', '/readyz');
      expect(res.status).toBe(503);
      expect(res.body.status).toBe('unavailable');
      expect((await call(app, 'GET', '/healthz')).status).toBe(200);
      // Without queues there is no dashboard.
      expect((await call(app, 'GET', '/admin/queues', { token: 'x' })).status).toBe(404);
    } finally {
      await app.close();
    }
  });

  it('serves Prometheus text with every taskledger metric, no auth needed', async () => {
    await http(api, 'GET', '/healthz');
    const res = await fetch(`${api.baseUrl}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    for (const name of [
      'taskledger_creations_total',
      'taskledger_creation_seconds',
      'taskledger_step_results_total',
      'taskledger_jobs_skipped_total',
      'taskledger_outbox_delivered_total',
      'taskledger_launches_total',
      'taskledger_http_request_seconds',
      'taskledger_begin_context_total',
      'process_cpu_user_seconds_total',
    ]) {
      expect(text).toContain(`# TYPE ${name}`);
    }
    expect(text).toMatch(/taskledger_http_request_seconds_count\{route="\/healthz",method="GET",status="200"\} \d+/);
  });
});

describe('Bull Board', () => {
  it('responds to an operator and refuses without a token (401) or with a member token (403)', async () => {
    const page = await fetch(`${api.baseUrl}/admin/queues`, { headers: { authorization: `Bearer ${api.adminToken}` } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<html');
    const queues = await http(api, 'GET', '/admin/queues/api/queues', { token: api.adminToken });
    expect(queues.status).toBe(200);
    expect(JSON.stringify(queues.body)).toContain(queueName);

    expect((await fetch(`${api.baseUrl}/admin/queues`)).status).toBe(401);
    expect((await fetch(`${api.baseUrl}/admin/queues/api/queues`)).status).toBe(401);
    expect((await http(api, 'GET', '/admin/queues', { token: 'wrong' })).status).toBe(401);
    const ws = await seedWorkspace(t.db);
    expect(
      (await fetch(`${api.baseUrl}/admin/queues`, { headers: { authorization: `Bearer ${ws.token}` } })).status,
    ).toBe(403);
  });

  it('a browser logs in with the form and uses the session cookie; a token in the URL opens nothing', async () => {
    const login = await fetch(`${api.baseUrl}/admin/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: api.adminToken }).toString(),
      redirect: 'manual',
    });
    expect(login.status).toBe(303);
    const cookie = login.headers.get('set-cookie') ?? '';
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/admin');
    // The session is derived from the token, never the token itself.
    expect(cookie).not.toContain(api.adminToken);
    expect(cookie).not.toContain(encodeURIComponent(api.adminToken));
    const apiCall = await fetch(`${api.baseUrl}/admin/queues/api/queues`, {
      headers: { cookie: cookie.split(';')[0]! },
    });
    expect(apiCall.status).toBe(200);
    const forged = cookie.split(';')[0]!.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A'));
    expect((await fetch(`${api.baseUrl}/admin/queues/api/queues`, { headers: { cookie: forged } })).status).toBe(401);
    // The old ?token= sign-in is gone: it neither authorizes nor sets a cookie.
    const viaUrl = await fetch(`${api.baseUrl}/admin/queues/api/queues?token=${encodeURIComponent(api.adminToken)}`);
    expect(viaUrl.status).toBe(401);
    expect(viaUrl.headers.get('set-cookie')).toBeNull();
    const member = await seedWorkspace(t.db);
    const refused = await fetch(`${api.baseUrl}/admin/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: member.token }).toString(),
      redirect: 'manual',
    });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('set-cookie')).toBeNull();
  });

  it("each job's Bull Board entry links to its operation in the ledger view", async () => {
    const operationId = randomUUID();
    await queue.add('step', { operationId }, { jobId: `link-${operationId}` });
    const res = await http(
      api,
      'GET',
      `/admin/queues/api/queues?activeQueue=${encodeURIComponent(queueName)}&status=waiting&page=1&jobsPerPage=50`,
      { token: api.adminToken },
    );
    expect(res.status).toBe(200);
    const ours = (res.body.queues as { name: string; jobs: { id: string; externalUrl?: { href: string } }[] }[])
      .find((q) => q.name === queueName)!
      .jobs.find((j) => j.id === `link-${operationId}`);
    expect(ours?.externalUrl?.href).toBe(`/admin/ledger/operations/${operationId}`);
  });

  it('links each job to its operation in the ledger view', () => {
    const op = '0191d5a0-0000-7000-8000-000000000001';
    expect(ledgerLinkOf({ data: { operationId: op } }).href).toBe(`/admin/ledger/operations/${op}`);
    expect(ledgerLinkOf({ data: { workspaceId: op } }).href).toBe(`/admin/ledger?workspace_id=${op}`);
    expect(ledgerLinkOf({ data: { operationId: '../x' } }).href).toBe('/admin/ledger');
  });
});
