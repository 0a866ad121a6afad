import { afterAll, describe, expect, test } from 'bun:test';
import type { Redis } from 'ioredis';
import { MemoryRateLimits } from './rate-limits';
import { rateLimitsContract } from './rate-limits.contract';
import { RedisRateLimits } from './redis/rate-limits';
import { dropPrefix, freshPrefix, privateRedis, redisClient, requireRedis } from '../../../tests/helpers/redis';

describe('MemoryRateLimits', () => {
  const shared = new MemoryRateLimits();
  rateLimitsContract({ node: () => shared });
});

const available = await requireRedis('libs/core/src/rate-limits.test.ts (Redis half)');
const prefix = freshPrefix('rl');
const clients: Redis[] = [];

afterAll(async () => {
  for (const c of clients) c.disconnect();
  if (available) await dropPrefix(prefix);
});

describe.skipIf(!available)('RedisRateLimits', () => {
  rateLimitsContract({
    node: () => {
      const c = redisClient();
      clients.push(c);
      return new RedisRateLimits(c, prefix);
    },
  });
});

/** What only the Redis implementation has: the leases this process holds, put back after Redis lost them. */
describe.skipIf(!available)('RedisRateLimits: leases after a data loss', () => {
  const make = () => {
    const c = redisClient();
    clients.push(c);
    return { c, limits: new RedisRateLimits(c, `${prefix}live:`) };
  };

  test('renewLive puts back every lease still held (and only those) after their keys were deleted', async () => {
    const { c, limits } = make();
    const a = (await limits.acquire('k1', { max: 2, leaseMs: 60_000 }))!;
    const b = (await limits.acquire('k1', { max: 2, leaseMs: 60_000 }))!;
    const d = (await limits.acquire('k2', { max: 1, leaseMs: 60_000 }))!;
    await limits.release(b);
    await c.del(...(await c.keys(`${prefix}live:*`)));
    expect(await limits.active('k1')).toBe(0);
    expect(await limits.renewLive()).toBe(2);
    expect([await limits.active('k1'), await limits.active('k2')]).toEqual([1, 1]);
    expect(await limits.acquire('k1', { max: 1, leaseMs: 60_000 })).toBeNull();
    expect(await limits.renewLive()).toBe(0);
    await Promise.all([limits.release(a), limits.release(d)]);
    expect([await limits.active('k1'), await limits.active('k2')]).toEqual([0, 0]);
  });
});

/**
 * A renewal re-adds a lease it finds missing (after a data loss). One still unanswered when the request ends must
 * not land after the release: when Redis lost its scripts under an open connection, the renewal is sent
 * again as EVAL once its NOSCRIPT comes back, after the release's ZREM, and the finished request counted for a
 * whole lease more. Private redis-server: SCRIPT FLUSH is never sent to the shared one.
 */
describe.skipIf(!Bun.which('redis-server'))('RedisRateLimits: a release right after a renewal', () => {
  test('the released lease stays released, and its slot is free', async () => {
    const server = await privateRedis();
    const c = redisClient(server.url);
    try {
      const limits = new RedisRateLimits(c, 'p:');
      const lease = (await limits.acquire('k', { max: 1, leaseMs: 60_000 }))!;
      // Loaded on this connection, then gone from the server while the connection stays (SCRIPT FLUSH, a
      // proxy in front of Redis switching to another server): the next renewal gets NOSCRIPT.
      await limits.renew(lease, 60_000);
      await c.script('FLUSH');
      const renewal = limits.renew(lease, 60_000);
      await limits.release(lease);
      await renewal;
      expect(await limits.active('k')).toBe(0);
      expect(await limits.acquire('k', { max: 1, leaseMs: 60_000 })).not.toBeNull();
    } finally {
      c.disconnect();
      await server.stop();
    }
  });
});
