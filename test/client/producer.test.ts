/**
 * The producer client (`taskledger/client`) against a real fleet: REST
 * `createTask` with its retry by external ID after a lost answer (a proxy
 * that drops the first answer after the API committed), and the admission
 * queue (`AdmissionProducer`) with its awaited outcome and the typed
 * rejection of bad input, recorded on the job, never retried, nothing
 * written. Both dialects.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Job } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMISSION_QUEUE, type AdmissionJob } from '../../queues/names';
import { AdmissionProducer, TaskLedgerApiError, TaskLedgerClient } from '../../src/client';
import { count, sql, useTestDb } from '../support/db';
import { seedWorkspace } from '../support/seed';
import { useWorld, waitFor, type FleetWorld } from '../fleet/support';

const t = useTestDb();
let w: FleetWorld;
useWorld(t, (world) => (w = world));

/** Forwards to the API; the first `drops` POSTs reach it (and commit) but their answer is cut off. */
function lossyProxy(drops: number): { start(): Promise<string>; posts: number; close(): Promise<void> } {
  let server: Server;
  const state = {
    posts: 0,
    async start() {
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          void (async () => {
            const upstream = await fetch(`${w.baseUrl}${req.url}`, {
              method: req.method,
              headers: { 'content-type': 'application/json', authorization: req.headers.authorization ?? '' },
              body: req.method === 'POST' ? Buffer.concat(chunks) : undefined,
            });
            const text = await upstream.text();
            if (req.method === 'POST' && state.posts++ < drops) {
              req.socket.destroy();
              return;
            }
            res.writeHead(upstream.status, { 'content-type': 'application/json' }).end(text);
          })();
        });
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  return state;
}

const redisConnection = () => {
  const u = new URL(w.config.redisUrl);
  return { host: u.hostname, port: Number(u.port || 6379) };
};

const tokenId = (): string => w.ws.member.authority_id;

describe('TaskLedgerClient.createTask over REST', () => {
  it('creates, then finds the same task for the same external ID', async () => {
    const client = new TaskLedgerClient({ baseUrl: w.baseUrl, token: w.ws.token });
    const req = { workspace_id: w.ws.workspaceId, title: 'client task', external_id: 'client-1' };
    const first = await client.createTask(req, { waitMs: 20_000 });
    expect(first).toMatchObject({ http_status: 200, deduplicated: false, creation_complete: true });
    const again = await client.createTask(req, { waitMs: 20_000 });
    expect(again).toMatchObject({ http_status: 200, deduplicated: true });
    expect(again.task.id).toBe(first.task.id);
    const found = await client.findByExternalId(w.ws.workspaceId, 'client-1');
    expect(found.task.id).toBe(first.task.id);
    expect((await client.getOperation(first.operation_id)).state).toBe('completed');
  });

  it('retries a lost answer with the same external ID and gets the one task it created', async () => {
    const proxy = lossyProxy(1);
    const baseUrl = await proxy.start();
    try {
      const client = new TaskLedgerClient({ baseUrl, token: w.ws.token, retryDelayMs: 10 });
      const res = await client.createTask(
        { workspace_id: w.ws.workspaceId, title: 'lost answer', external_id: 'client-lost' },
        { waitMs: 20_000 },
      );
      expect(proxy.posts).toBe(2);
      expect(res).toMatchObject({ http_status: 200, deduplicated: true });
      expect(
        await count(t.db, 'tasks', 'workspace_id = ? AND external_id = ?', [w.ws.workspaceId, 'client-lost']),
      ).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('does not retry a lost answer without an external ID (a retry could duplicate)', async () => {
    const proxy = lossyProxy(1);
    const baseUrl = await proxy.start();
    try {
      const client = new TaskLedgerClient({ baseUrl, token: w.ws.token, retryDelayMs: 10 });
      await expect(
        client.createTask({ workspace_id: w.ws.workspaceId, title: 'no identity' }, { waitMs: 20_000 }),
      ).rejects.toThrow(/no answer/);
      expect(proxy.posts).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('throws TaskLedgerApiError with the API code and field for bad input', async () => {
    const client = new TaskLedgerClient({ baseUrl: w.baseUrl, token: w.ws.token });
    const err = await client
      .createTask({ workspace_id: w.ws.workspaceId, title: 'x', colour: 'red' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskLedgerApiError);
    expect(err).toMatchObject({ httpStatus: 400, code: 'invalid_request', field: '/colour' });
  });
});

describe('AdmissionProducer on the admission queue', () => {
  let producer: AdmissionProducer;
  beforeAll(async () => {
    producer = new AdmissionProducer({
      connection: redisConnection(),
      prefix: w.config.queuePrefix,
      tokenId: tokenId(),
    });
  });
  afterAll(async () => {
    await producer?.close();
  });

  it('enqueues a creation and awaits the REST answer; the same external ID is found, not created again', async () => {
    const req = { workspace_id: w.ws.workspaceId, title: 'queued', external_id: 'producer-1' };
    const first = await producer.awaitOutcome(await producer.enqueueCreation(req, { waitMs: 20_000 }));
    expect(first).toMatchObject({ http_status: 200, deduplicated: false, creation_complete: true });
    expect(first.task.external_id).toBe('producer-1');
    const again = await producer.awaitOutcome(await producer.enqueueCreation(req));
    expect(again).toMatchObject({ http_status: 200, deduplicated: true, creation_complete: true });
    expect(again.task.id).toBe(first.task.id);
  });

  it('without waitMs answers 202 at once and the fleet finishes the creation', async () => {
    const res = await producer.awaitOutcome(
      await producer.enqueueCreation({
        workspace_id: w.ws.workspaceId,
        title: 'later',
        external_id: 'producer-2',
        repositories: [{ repository_id: w.ws.repositoryId }],
      }),
    );
    expect([200, 202]).toContain(res.http_status);
    await waitFor('the queued creation to complete', async () => {
      const [op] = await sql<{ state: string }>(t.db, 'SELECT state FROM task_creation_operations WHERE id = ?', [
        res.operation_id,
      ]);
      return op?.state === 'completed';
    });
  });

  it('bad input: the REST rejection, recorded on the job, not retried, nothing written', async () => {
    const before = await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId]);
    const tasksBefore = await count(t.db, 'tasks', 'workspace_id = ?', [w.ws.workspaceId]);
    const jobId = await producer.enqueueCreation({ workspace_id: w.ws.workspaceId, title: 'x', colour: 'red' });
    const err = await producer.awaitOutcome(jobId).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskLedgerApiError);
    expect(err).toMatchObject({ httpStatus: 400, code: 'invalid_request', field: '/colour' });

    // A producer that asked BullMQ for retries still gets one attempt: the refusal is unrecoverable.
    const queue = w.fleet.queues.get(ADMISSION_QUEUE);
    const retried = await queue.add(
      'create',
      { tokenId: tokenId(), body: { workspace_id: w.ws.workspaceId, title: 7 } } satisfies AdmissionJob,
      { attempts: 3, backoff: { type: 'fixed', delay: 10 }, removeOnFail: false },
    );
    // Judged on the job hash as read (finishedOn is set by the script that counts the attempt), not only on the
    // failed set, which may have taken the job after the hash was read (attemptsMade still 0 in that read).
    const failed = await waitFor('the job to fail', async () => {
      const job = await Job.fromId(queue, retried.id!);
      return job?.finishedOn !== undefined && (await job.isFailed()) ? job : null;
    });
    expect(failed.attemptsMade).toBe(1);
    expect(JSON.parse(failed.failedReason)).toMatchObject({
      http_status: 400,
      error: 'invalid_request',
      detail: { field: '/title' },
    });
    expect(await count(t.db, 'task_creation_operations', 'workspace_id = ?', [w.ws.workspaceId])).toBe(before);
    expect(await count(t.db, 'tasks', 'workspace_id = ?', [w.ws.workspaceId])).toBe(tasksBefore);
  });

  it('a malformed job, an unknown token ID and another workspace are refused with typed codes', async () => {
    const queue = w.fleet.queues.get(ADMISSION_QUEUE);
    const malformed = await queue.add('create', { body: {} } as unknown as AdmissionJob, { removeOnFail: false });
    const other = await seedWorkspace(t.db);
    const outsider = new AdmissionProducer({
      connection: redisConnection(),
      prefix: w.config.queuePrefix,
      tokenId: other.member.authority_id,
    });
    const stranger = new AdmissionProducer({
      connection: redisConnection(),
      prefix: w.config.queuePrefix,
      tokenId: '00000000-0000-4000-8000-000000000000',
    });
    try {
      await expect(producer.awaitOutcome(malformed.id!)).rejects.toMatchObject({
        code: 'invalid_request',
        field: '/tokenId',
      });
      const req = { workspace_id: w.ws.workspaceId, title: 'not yours' };
      await expect(outsider.awaitOutcome(await outsider.enqueueCreation(req))).rejects.toMatchObject({
        httpStatus: 404,
        code: 'task not created',
      });
      await expect(stranger.awaitOutcome(await stranger.enqueueCreation(req))).rejects.toMatchObject({
        httpStatus: 401,
        code: 'unauthorized',
      });
    } finally {
      await outsider.close();
      await stranger.close();
    }
  });
});
