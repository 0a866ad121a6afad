import { afterAll, describe } from 'bun:test';
import type { Redis } from 'ioredis';
import { holdStoreContract } from './contract';
import { MemoryHoldStore } from './memory';
import { RedisHoldStore } from './redis';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../../../../tests/helpers/redis';

describe('MemoryHoldStore', () => {
  holdStoreContract({
    cluster: (load, loadBudgets) => {
      const store = new MemoryHoldStore(load, Date.now, loadBudgets);
      return { node: () => store };
    },
  });
});

const available = await requireRedis('libs/billing/src/holds/holds.test.ts (Redis half)');
const prefix = freshPrefix('holds');
const clients: Redis[] = [];

afterAll(async () => {
  for (const c of clients) c.disconnect();
  if (available) await dropPrefix(prefix);
});

describe.skipIf(!available)('RedisHoldStore', () => {
  holdStoreContract({
    cluster: (load, loadBudgets) => ({
      node: () => {
        const c = redisClient();
        clients.push(c);
        return new RedisHoldStore(c, load, { prefix, recoveryMs: 0, loadBudgets });
      },
    }),
  });
});
