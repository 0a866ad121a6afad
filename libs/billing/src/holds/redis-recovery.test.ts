/**
 * Redis losing its data (FLUSHALL, or a restart without persistence) must not let a node admit
 * against a freshly loaded balance while other nodes' requests are still in flight: the epoch
 * guard makes admissions that need a mirror wait until live holds were renewed back in.
 * Runs on a private redis-server, never on the shared one.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import Redis from 'ioredis';
import type { Mirror, MirrorLoader } from './port';
import { LiveHolds } from './live-holds';
import { RedisHoldStore, evictionRisk, evictionRiskOf } from './redis';
import { privateRedis } from '../../../../tests/helpers/redis';

const hasServer = Bun.which('redis-server') !== null;
if (!hasServer) console.warn('SKIPPED libs/billing/src/holds/redis-recovery.test.ts: no redis-server binary');

describe.skipIf(!hasServer)('RedisHoldStore after Redis lost its data', () => {
  let server: Awaited<ReturnType<typeof privateRedis>>;
  const clients: Redis[] = [];
  const connect = () => {
    const c = new Redis(server.url, { maxRetriesPerRequest: 2 });
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    server = await privateRedis();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await server?.stop();
  });

  test('admissions wait out the recovery window, live holds are renewed back, and nothing is overspent', async () => {
    const ledger = new Map<number, Mirror>([[1, { balance: 100, version: 1 }]]);
    const load: MirrorLoader = async (userId) => ({ user: ledger.get(userId) ?? null, key: null });
    const recoveryMs = 300;
    const a = new RedisHoldStore(connect(), load, { recoveryMs });
    const b = new RedisHoldStore(connect(), load, { recoveryMs });

    // An empty Redis is indistinguishable from one that lost its data: the first admission waits too.
    const first = await a.reserve({ userId: 1, amount: 50, ref: 'r1', leaseMs: 30_000 });
    expect(first).toMatchObject({ ok: false, reason: 'unavailable' });
    if (first.ok || first.reason !== 'unavailable') throw new Error('unreachable');
    expect(first.retryAfterMs).toBeGreaterThan(0);
    expect(first.retryAfterMs).toBeLessThanOrEqual(recoveryMs);
    await Bun.sleep(first.retryAfterMs + 20);
    // A's request stays in flight; its renewal loop runs every lease/3 = 100 ms < recoveryMs.
    const leaseMs = 300;
    const live = await a.reserve({ userId: 1, amount: 50, ref: 'r1', leaseMs });
    if (!live.ok) throw new Error(`reserve failed: ${JSON.stringify(live)}`);
    const renewals = new LiveHolds(a, leaseMs);
    renewals.track(live.hold);

    const admin = connect();
    await admin.flushall();
    // Also drop the scripts: the stores must fall back from EVALSHA to EVAL.
    await admin.script('FLUSH');

    // Node B's mirror is gone. Loading the ledger's 100 now would admit 60 next to A's 50 in flight.
    const during = await b.reserve({ userId: 1, amount: 60, ref: 'r2', leaseMs: 30_000 });
    expect(during).toMatchObject({ ok: false, reason: 'unavailable' });
    // Meanwhile A's renewal loop puts its live hold back, unprompted.
    await Bun.sleep(recoveryMs + 20);
    expect(await b.reserve({ userId: 1, amount: 60, ref: 'r2', leaseMs: 30_000 })).toEqual({ ok: false, reason: 'short', scope: 'user', available: 50, shortBy: 10 });
    expect((await b.reserve({ userId: 1, amount: 50, ref: 'r3', leaseMs: 30_000 })).ok).toBe(true);
    expect(await a.available({ userId: 1 })).toEqual({ user: 0, key: null });
    renewals.close();
    // No lease lapsed meanwhile: nothing in limbo.
    expect(await b.expired()).toEqual([]);
  });

  test('a mirror read while Redis loses its data is not installed after the loss: the admission waits the window like any other', async () => {
    const admin = connect();
    await admin.flushall();
    // A data loss that lands after the loader's epoch check and before its install (the ledger read in between).
    let lossDuringLoad = false;
    const load: MirrorLoader = async () => {
      if (lossDuringLoad) await admin.flushall();
      return { user: { balance: 100, version: 1 }, key: null };
    };
    const a = new RedisHoldStore(connect(), load, { recoveryMs: 300 });
    const b = new RedisHoldStore(connect(), load, { recoveryMs: 300 });
    await admin.set('gw:{epoch}', '0');
    const live = await a.reserve({ userId: 3, amount: 50, ref: 'x1', leaseMs: 30_000 });
    if (!live.ok) throw new Error(`reserve failed: ${JSON.stringify(live)}`);
    // A's 50 stays in flight (its renewal would bring it back within the window). B's mirror of user 3 is not
    // there yet; Redis loses everything while B reads the ledger's 100.
    await admin.del('gw:{u:3}:acct');
    lossDuringLoad = true;
    expect(await b.reserve({ userId: 3, amount: 60, ref: 'x2', leaseMs: 30_000 })).toMatchObject({ ok: false, reason: 'unavailable' });
    lossDuringLoad = false;
    // Nothing was installed from that read: every node's next admission waits too, until A's hold is back.
    expect(await admin.hget('gw:{u:3}:acct', 'bal')).toBeNull();
    expect(await a.reserve({ userId: 3, amount: 60, ref: 'x3', leaseMs: 30_000 })).toMatchObject({ ok: false, reason: 'unavailable' });
    expect(await a.renew([live.hold], 30_000)).toBe(1);
    await Bun.sleep(320);
    expect(await b.reserve({ userId: 3, amount: 60, ref: 'x2', leaseMs: 30_000 })).toEqual({ ok: false, reason: 'short', scope: 'user', available: 50, shortBy: 10 });
  });

  test('the index touch is skipped within half a lease of the last, and redone after a data loss (no orphaned hold)', async () => {
    const ledger = new Map<number, Mirror>([[7, { balance: 1000, version: 1 }]]);
    const load: MirrorLoader = async (userId) => ({ user: ledger.get(userId) ?? null, key: null });
    const redis = connect();
    await redis.flushall();
    const a = new RedisHoldStore(redis, load, { recoveryMs: 0 });
    const index = 'gw:{holds}:users';
    const reserve = async (ref: string) => {
      const r = await a.reserve({ userId: 7, amount: 10, ref, leaseMs: 30_000 });
      if (!r.ok) throw new Error(`reserve failed: ${JSON.stringify(r)}`);
      return r.hold;
    };
    await a.release(await reserve('t1'));
    const score = await redis.zscore(index, '7');
    expect(score).not.toBeNull();
    await Bun.sleep(20);
    // Fresh: no touch, so the score (server time + lease when touched) has not moved.
    const h2 = await reserve('t2');
    expect(await redis.zscore(index, '7')).toBe(score);
    expect(await a.holders()).toEqual([7]);
    await a.release(h2);
    // Redis loses everything: the next admission loads the mirror and touches again, so the hold is indexed.
    await redis.flushall();
    const h3 = await reserve('t3');
    expect(await a.holders()).toEqual([7]);
    expect(Number(await redis.zscore(index, '7'))).toBeGreaterThan(Number(score));
    await a.release(h3);
  });

  test('a hold released while a renewal of it is unanswered stays released, even when that renewal is sent again', async () => {
    const load: MirrorLoader = async () => ({ user: { balance: 1000, version: 1 }, key: null });
    const redis = connect();
    await redis.flushall();
    const a = new RedisHoldStore(redis, load, { recoveryMs: 0 });
    const r = await a.reserve({ userId: 9, amount: 100, ref: 'n1', leaseMs: 30_000 });
    if (!r.ok) throw new Error(`reserve failed: ${JSON.stringify(r)}`);
    const live = new LiveHolds(a, 30_000);
    try {
      live.track(r.hold);
      await live.renewNow();
      // The scripts go from the server while this connection stays (SCRIPT FLUSH, a proxy in front of Redis
      // switching servers): the next renewal gets NOSCRIPT and ioredis sends it again, as EVAL, after the release.
      await connect().script('FLUSH');
      const renewal = live.renewNow();
      await live.release(r.hold);
      await renewal;
      // Re-registered, the hold would keep 100 of the user's money until its lease lapsed and the reconciler came.
      expect(await a.available({ userId: 9 })).toEqual({ user: 1000, key: null });
    } finally {
      live.close();
    }
  });

  test('an allkeys-* eviction policy with a memory limit is reported (it may evict hold keys); noeviction is not', async () => {
    const admin = connect();
    expect(await evictionRisk(admin)).toBeNull();
    await admin.config('SET', 'maxmemory', '64mb');
    expect(await evictionRisk(admin)).toBeNull();
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    expect(await evictionRisk(admin)).toContain('maxmemory-policy allkeys-lru');
    await admin.config('SET', 'maxmemory-policy', 'volatile-lru');
    expect(await evictionRisk(admin)).toBeNull();
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '0');
    // No memory limit: nothing is ever evicted, whatever the policy.
    expect(evictionRiskOf('allkeys-lfu', 0)).toBeNull();
    expect(evictionRiskOf('allkeys-random', 1)).toContain('allkeys-random');
  });
});
