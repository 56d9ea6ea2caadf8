/**
 * A test file's own Redis connection and BullMQ queues, under a prefix no
 * other file uses, obliterated and closed after the file's tests. Redis
 * holds wake-ups only; the queues start empty for each file.
 */
import { randomUUID } from 'node:crypto';
import { afterAll } from 'vitest';
import { QueueSet } from '../../src/coordinator/queues';
import { createRedis } from '../../src/runtime/redis';

export function useTestQueues(name: string): { redis: ReturnType<typeof createRedis>; queues: QueueSet } {
  const redis = createRedis(process.env.TASKLEDGER_REDIS_URL ?? 'redis://127.0.0.1:6379');
  const queues = new QueueSet(redis, `tl-${name}-${randomUUID().slice(0, 8)}`);
  afterAll(async () => {
    for (const q of queues.all()) await q.obliterate({ force: true });
    await queues.close();
    redis.disconnect();
  });
  return { redis, queues };
}
