import { afterAll, describe, expect, test } from 'bun:test';
import type { Redis } from 'ioredis';
import { MemoryRateLimits } from './rate-limits';
import { rateLimitsContract } from './rate-limits.contract';
import { RedisRateLimits } from './redis/rate-limits';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../../../tests/helpers/redis';

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
