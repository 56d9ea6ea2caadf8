/**
 * A runnable producer: creates one task over REST (retried by external ID
 * if the answer is lost) and one through the admission queue (awaiting its
 * outcome), then shows a refused request's typed error.
 *
 *   TASKLEDGER_URL=http://127.0.0.1:8080 TASKLEDGER_TOKEN=... TASKLEDGER_TOKEN_ID=... \
 *   TASKLEDGER_WORKSPACE_ID=... npm run example:producer
 *
 * Needs a running fleet (`taskledger start`, with the api and admission
 * roles) and a workspace member token (`POST /api/v1/workspaces/:id/tokens`
 * returns `token` and its `id`). TASKLEDGER_REDIS_URL and
 * TASKLEDGER_QUEUE_PREFIX must match the fleet's.
 */
import { AdmissionProducer, TaskLedgerApiError, TaskLedgerClient } from 'taskledger/client';

function env(name: string, fallback?: string): string {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`set ${name}`);
  return value;
}

async function main(): Promise<void> {
  const workspaceId = env('TASKLEDGER_WORKSPACE_ID');
  const stamp = Date.now();

  // 1. REST: the external ID makes a retry after a lost answer find the same task.
  const client = new TaskLedgerClient({
    baseUrl: env('TASKLEDGER_URL', 'http://127.0.0.1:8080'),
    token: env('TASKLEDGER_TOKEN'),
  });
  const created = await client.createTask(
    { workspace_id: workspaceId, title: 'Fix the flaky login test', external_id: `example-rest-${stamp}` },
    { waitMs: 20_000 },
  );
  console.log('REST:', created.http_status, created.task.id, {
    deduplicated: created.deduplicated,
    creation_complete: created.creation_complete,
  });

  // 2. Admission queue: enqueue, then await the outcome through BullMQ QueueEvents.
  const redis = new URL(env('TASKLEDGER_REDIS_URL', 'redis://127.0.0.1:6379'));
  const producer = new AdmissionProducer({
    connection: { host: redis.hostname, port: Number(redis.port || 6379) },
    prefix: env('TASKLEDGER_QUEUE_PREFIX', 'taskledger'),
    tokenId: env('TASKLEDGER_TOKEN_ID'),
  });
  try {
    const jobId = await producer.enqueueCreation(
      { workspace_id: workspaceId, title: 'Triage webhook payload', external_id: `example-queue-${stamp}` },
      { waitMs: 20_000 },
    );
    const outcome = await producer.awaitOutcome(jobId, 30_000);
    console.log('queue:', outcome.http_status, outcome.task.id, { creation_complete: outcome.creation_complete });

    // 3. Bad input gets the same typed rejection as REST, recorded on the job; nothing is written.
    const bad = await producer.enqueueCreation({ workspace_id: workspaceId, title: 'x', colour: 'red' });
    await producer.awaitOutcome(bad).catch((err: unknown) => {
      if (!(err instanceof TaskLedgerApiError)) throw err;
      console.log('refused:', err.code, err.field);
    });
  } finally {
    await producer.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
