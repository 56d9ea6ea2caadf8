/**
 * Redis connections for BullMQ. Redis holds wake-up calls only; losing every
 * key loses no creation (the sweep re-enqueues from the ledger). BullMQ
 * workers need `maxRetriesPerRequest: null` so blocking commands survive
 * reconnects. `deleteQueuePrefix` removes every key of one queue prefix (a
 * bench run's, a test fleet's) once its fleet has stopped.
 */
import { Redis } from 'ioredis';

export function createRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false });
}

/** Deletes every key under `<prefix>:` on the Redis at `url`, with its own short-lived connection. */
export async function deleteQueuePrefix(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}
