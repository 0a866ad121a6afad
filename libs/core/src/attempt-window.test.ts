import { afterAll, describe, expect, test } from 'bun:test';
import Redis from 'ioredis';
import { localWindows, sharedWindows, type AttemptWindows } from './attempt-window';
import { RedisRateLimits } from './redis/rate-limits';
import { freshPrefix, redisReachable, REDIS_TEST_URL } from '../../../tests/helpers/redis';

const redisUp = await redisReachable();
const redis = redisUp ? new Redis(REDIS_TEST_URL, { maxRetriesPerRequest: 2 }) : null;
afterAll(() => redis?.disconnect());

const kinds: Array<[string, () => AttemptWindows]> = [
  ['local', () => localWindows],
  ['shared (Redis)', () => sharedWindows(new RedisRateLimits(redis!, freshPrefix('attempts')))],
];

for (const [name, make] of kinds) {
  describe.skipIf(name !== 'local' && !redisUp)(`${name} attempt windows`, () => {
    test('count, hit up to the limit then a wait in seconds, reset; flows and keys apart', async () => {
      const windows = make();
      const w = windows('login-ip', 60_000);
      const other = windows('redeem', 60_000);
      expect(await w.count('1.2.3.4')).toBe(0);
      for (let i = 0; i < 3; i++) expect(await w.hit('1.2.3.4', 3)).toBe(0);
      const wait = await w.hit('1.2.3.4', 3);
      expect(wait).toBeGreaterThanOrEqual(1);
      expect(wait).toBeLessThanOrEqual(60);
      expect(Math.floor(await w.count('1.2.3.4'))).toBe(3);
      // Another key and another flow with the same key count nothing of these.
      expect(await w.count('5.6.7.8')).toBe(0);
      expect(await other.count('1.2.3.4')).toBe(0);
      // Counting every failure (no limit) keeps counting.
      await w.hit('u1', Number.MAX_SAFE_INTEGER);
      await w.hit('u1', Number.MAX_SAFE_INTEGER);
      expect(Math.floor(await w.count('u1'))).toBe(2);
      await w.reset('1.2.3.4');
      expect(await w.count('1.2.3.4')).toBe(0);
      expect(await w.hit('1.2.3.4', 3)).toBe(0);
    });
  });
}

test.skipIf(!redisUp)('two shared windows (two nodes) count the same attempts', async () => {
  const prefix = freshPrefix('attempts2');
  const a = sharedWindows(new RedisRateLimits(redis!, prefix))('2fa', 300_000);
  const second = new Redis(REDIS_TEST_URL, { maxRetriesPerRequest: 2 });
  const b = sharedWindows(new RedisRateLimits(second, prefix))('2fa', 300_000);
  expect(await a.hit('u9', 2)).toBe(0);
  expect(await b.hit('u9', 2)).toBe(0);
  expect(await a.hit('u9', 2)).toBeGreaterThan(0);
  expect(Math.floor(await b.count('u9'))).toBe(2);
  second.disconnect();
});
