import { afterAll, describe, expect, test } from 'bun:test';
import dc from 'node:diagnostics_channel';
import Redis from 'ioredis';
import { skipUnobservedTracing } from './tracing';
import { freshPrefix, redisReachable, REDIS_TEST_URL } from '../../../../tests/helpers/redis';

const redisUp = await redisReachable();
const redis = redisUp ? new Redis(REDIS_TEST_URL, { maxRetriesPerRequest: 2 }) : null;
afterAll(() => redis?.disconnect());

describe('TracingChannel.hasSubscribers', () => {
  test('false with no subscriber, true while one part has one', () => {
    skipUnobservedTracing();
    skipUnobservedTracing();
    const ch = dc.tracingChannel('gw:test:tracing');
    expect(ch.hasSubscribers).toBe(false);
    const onEnd = () => {};
    dc.channel('tracing:gw:test:tracing:asyncEnd').subscribe(onEnd);
    expect(ch.hasSubscribers).toBe(true);
    dc.channel('tracing:gw:test:tracing:asyncEnd').unsubscribe(onEnd);
    expect(ch.hasSubscribers).toBe(false);
  });
});

describe.skipIf(!redisUp)('ioredis commands', () => {
  test('build no trace while nobody listens, and are traced for a subscriber', async () => {
    skipUnobservedTracing();
    const r = redis!;
    const key = `${freshPrefix('tracing')}k`;
    // The trace context (each argument copied to a string) is ioredis's per-command cost of tracing.
    const built: string[] = [];
    const own = (r as unknown as { _buildCommandContext: (c: { name: string }) => unknown })._buildCommandContext.bind(r);
    (r as unknown as { _buildCommandContext: (c: { name: string }) => unknown })._buildCommandContext = (c) => { built.push(c.name); return own(c); };
    await r.set(key, 'v', 'PX', 60_000);
    expect(await r.get(key)).toBe('v');
    expect(built).toEqual([]);

    const seen: string[] = [];
    const ch = dc.tracingChannel('ioredis:command');
    const subscribers = { start: (m: unknown) => { seen.push((m as { command: string }).command); }, end: () => {}, asyncStart: () => {}, asyncEnd: () => {}, error: () => {} };
    ch.subscribe(subscribers);
    try {
      expect(await r.get(key)).toBe('v');
    } finally {
      ch.unsubscribe(subscribers);
    }
    expect(seen).toEqual(['get']);
    await r.del(key);
  });
});
