/**
 * "Creation ended" announcements over Redis pub/sub (src/coordinator/creation-events.ts):
 * a process knows when it hears them (`listening`: the subscription confirmed
 * and its connection up), which lets a waiting request poll the ledger
 * rarely; an announcement wakes exactly the waiters of its operation. Real
 * Redis; the ledger is not involved, so each dialect's project runs the same
 * test.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { configFromEnv } from '../../src/app/config';
import { createRedis } from '../../src/runtime/redis';
import { CreationEvents } from '../../src/coordinator/creation-events';

const opened: { events: CreationEvents; close: () => void }[] = [];

function open(channel = `tl-events-${randomUUID().slice(0, 8)}`) {
  const connection = createRedis(configFromEnv().redisUrl);
  const events = new CreationEvents(connection, channel);
  opened.push({ events, close: () => connection.disconnect() });
  return events;
}

afterEach(() => {
  for (const o of opened.splice(0)) {
    o.events.close();
    o.close();
  }
});

const settled = (p: Promise<void>) =>
  Promise.race([p.then(() => 'woken'), new Promise((r) => setTimeout(() => r('still waiting'), 300))]);

describe('creation-ended announcements', () => {
  it('are heard once the subscription is confirmed, and no longer once closed', async () => {
    const events = open();
    expect(events.listening).toBe(false);
    await events.ready();
    expect(events.listening).toBe(true);
    events.close();
    expect(events.listening).toBe(false);
  });

  it('wake the waiters of the announced operation, and only those', async () => {
    const channel = `tl-events-${randomUUID().slice(0, 8)}`;
    const listener = open(channel);
    const announcer = open(channel);
    await listener.ready();
    const mine = randomUUID();
    const other = randomUUID();
    const waitMine = listener.signal(mine);
    const waitOther = listener.signal(other);
    await announcer.announce(mine);
    expect(await settled(waitMine.promise)).toBe('woken');
    expect(await settled(waitOther.promise)).toBe('still waiting');
    waitOther.cancel();
  });
});
