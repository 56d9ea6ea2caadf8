/**
 * Redis connections for BullMQ. Redis holds wake-up calls only; losing every
 * key loses no creation (the sweep re-enqueues from the ledger). BullMQ
 * workers need `maxRetriesPerRequest: null` so blocking commands survive
 * reconnects.
 */
import { Redis } from 'ioredis';

export function createRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false });
}
