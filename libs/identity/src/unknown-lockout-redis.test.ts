import { afterAll, expect, test } from 'bun:test';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../../../tests/helpers/redis';
import { RedisNameLockouts } from './unknown-lockout-redis';
import { UnknownNameLockout } from './unknown-lockout';

const ok = await requireRedis('unknown-name lockouts in Redis');
const prefix = freshPrefix('lockout');
const clients = ok ? [redisClient(), redisClient(), redisClient()] : [];
afterAll(async () => {
  for (const c of clients) c.disconnect();
  if (ok) await dropPrefix(prefix);
});
const policy = { maxFailures: 3, lockSeconds: 10 };

test.skipIf(!ok)('three nodes count one unknown name together: locked after maxFailures in all, wherever they land', async () => {
  const nodes = clients.map((c) => new RedisNameLockouts(c, policy, prefix));
  const name = `ghost-${Math.random()}`;
  const now = Date.now();
  await nodes[0]!.recordFailure(name);
  await nodes[1]!.recordFailure(name);
  for (const n of nodes) expect(await n.lockedUntil(name)).toBe(0);
  await nodes[2]!.recordFailure(name);
  const until = await nodes[0]!.lockedUntil(name);
  // The same arithmetic as a stored account's counter: now + lockSeconds (first lock), in seconds.
  expect(until).toBeGreaterThanOrEqual(Math.ceil(now / 1000) + 10);
  expect(until).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 10);
  for (const n of nodes) expect(await n.lockedUntil(name)).toBe(until);
  // Another name is untouched; the key never contains the name itself.
  expect(await nodes[1]!.lockedUntil(`${name}-other`)).toBe(0);
  const keys = await clients[0]!.keys(`${prefix}*`);
  expect(keys.length).toBe(1);
  expect(keys[0]).not.toContain('ghost');
});

test.skipIf(!ok)('concurrent failures from many nodes are each counted once (same locks as the in-process counter)', async () => {
  const nodes = clients.map((c) => new RedisNameLockouts(c, policy, prefix));
  const name = `burst-${Math.random()}`;
  // 7 failures at once: two locks (3 + 3), one failure towards the third; the second lock doubles.
  await Promise.all(Array.from({ length: 7 }, (_, i) => nodes[i % 3]!.recordFailure(name)));
  const mem = new UnknownNameLockout(policy);
  const t = Date.now();
  for (let i = 0; i < 7; i++) mem.recordFailure(name, t);
  const fields = await clients[0]!.hgetall(`${prefix}{ul:${new Bun.CryptoHasher('sha256').update(name).digest('hex').slice(0, 32)}}`);
  expect({ f: Number(fields.f), l: Number(fields.l) }).toEqual({ f: 1, l: 2 });
  const lockEnd = await nodes[0]!.lockedUntil(name);
  expect(Math.abs(lockEnd - mem.lockedUntil(name, t))).toBeLessThanOrEqual(1);
  // The key lives for the idle time past the lock's end, not forever.
  const ttl = await clients[0]!.pttl(`${prefix}{ul:${new Bun.CryptoHasher('sha256').update(name).digest('hex').slice(0, 32)}}`);
  expect(ttl).toBeGreaterThan(24 * 3600_000);
  expect(ttl).toBeLessThanOrEqual(24 * 3600_000 + 21_000);
});

test.skipIf(!ok)('claim from many nodes at once: as many pass as the in-process claim lets through, the rest get one lock', async () => {
  const nodes = clients.map((c) => new RedisNameLockouts(c, policy, prefix));
  const name = `claim-${Math.random()}`;
  const res = await Promise.all(Array.from({ length: 8 }, (_, i) => nodes[i % 3]!.claim(name)));
  const mem = new UnknownNameLockout(policy);
  const t = Date.now();
  const local = Array.from({ length: 8 }, () => mem.claim(name, t));
  expect(res.filter((r) => r === 0).length).toBe(local.filter((r) => r === 0).length);
  expect(res.filter((r) => r === 0).length).toBe(3);
  expect(new Set(res.filter((r) => r > 0)).size).toBe(1);
  expect(Math.abs(res.find((r) => r > 0)! - local.find((r) => r > 0)!)).toBeLessThanOrEqual(1);
});
