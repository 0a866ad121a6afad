import { afterAll, describe } from 'bun:test';
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
