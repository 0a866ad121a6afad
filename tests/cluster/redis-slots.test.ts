/**
 * Every command the Redis implementations send must touch keys of one hash slot, or it would fail
 * on a Redis Cluster (CROSSSLOT). Watches a private server with MONITOR while both stores run a
 * representative workload, and checks the hash tag of every key of every command.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import Redis from 'ioredis';
import { RedisRateLimits } from '@gw/core/redis/rate-limits';
import { RedisHoldStore } from '@gw/billing/holds/redis';
import { privateRedis } from '../helpers/redis';

const hasServer = Bun.which('redis-server') !== null;
if (!hasServer) console.warn('SKIPPED tests/cluster/redis-slots.test.ts: no redis-server binary');

/** The part of a key Redis Cluster hashes: the first non-empty {…}, else the whole key. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

/** Keys of a command as Redis sees it (scripts: after the sha/body and numkeys). */
function keysOf(args: string[]): string[] {
  const cmd = args[0]!.toLowerCase();
  if (cmd === 'evalsha' || cmd === 'eval') return args.slice(3, 3 + Number(args[2]));
  if (['hmget', 'hset', 'hget', 'zrem', 'zrange', 'unlink', 'del', 'get', 'set', 'zadd', 'hincrby'].includes(cmd)) return cmd === 'unlink' || cmd === 'del' ? args.slice(1) : [args[1]!];
  return [];
}

describe.skipIf(!hasServer)('Redis commands stay within one hash slot', () => {
  let server: Awaited<ReturnType<typeof privateRedis>>;
  const clients: Redis[] = [];
  beforeAll(async () => {
    server = await privateRedis();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await server?.stop();
  });

  test('rate limits and holds: every command has one hash tag', async () => {
    const connect = () => {
      const c = new Redis(server.url, { maxRetriesPerRequest: 2 });
      clients.push(c);
      return c;
    };
    const seen: string[][] = [];
    const monitor = await connect().monitor();
    monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));

    const redis = connect();
    const limits = new RedisRateLimits(redis, 'gw:');
    await limits.hit('key:7', { limit: 10, windowMs: 60_000 });
    await limits.reset('key:7');
    const lease = (await limits.acquire('rt:7', { max: 2, leaseMs: 1_000 }))!;
    await limits.renew(lease, 1_000);
    await limits.active('rt:7');
    await limits.release(lease);

    const holds = new RedisHoldStore(redis, async () => ({ user: { balance: 1_000, version: 1 }, key: { balance: 500, version: 1 } }), { prefix: 'gw:', recoveryMs: 0 });
    const a = await holds.reserve({ userId: 1, keyId: 9, amount: 10, ref: 'a', leaseMs: 50 });
    const b = await holds.reserve({ userId: 2, amount: 10, ref: 'b', leaseMs: 50 });
    if (!a.ok || !b.ok) throw new Error('reserve failed');
    await holds.renew([a.hold, b.hold], 50);
    await holds.settle(a.hold, 5);
    await holds.applyBalance({ userId: 1, keyId: 9 }, { balance: 400, version: 2 });
    await holds.available({ userId: 1, keyId: 9 });
    await Bun.sleep(80);
    await holds.expired();
    await holds.release(a.hold, { user: { balance: 995, version: 3 }, key: { balance: 395, version: 3 } });
    await holds.release(b.hold);
    await holds.expired();
    await Bun.sleep(50);
    monitor.disconnect();

    const scripts = seen.filter((a) => ['evalsha', 'eval'].includes(a[0]!.toLowerCase()));
    expect(scripts.length).toBeGreaterThan(15);
    const crossSlot = seen.map((args) => ({ cmd: `${args[0]} ${(args[1] ?? '').slice(0, 40)}`, tags: [...new Set(keysOf(args).map(hashTag))] })).filter((c) => c.tags.length > 1);
    expect(crossSlot).toEqual([]);
    // And the tags are the intended ones: per user, per limit, the index, the epoch.
    const tags = new Set(seen.flatMap((args) => keysOf(args).map(hashTag)));
    expect([...tags].sort()).toEqual(['cc:rt:7', 'epoch', 'holds', 'rl:key:7', 'u:1', 'u:2']);
  });
});
