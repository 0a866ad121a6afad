/**
 * followBalances on a follower node, against the real PostgreSQL change feed and Redis: a burst of balance
 * moves committed elsewhere is read back in a few batched statements (not one per user or key) and every
 * mirror ends equal to the ledger; a batch whose read fails is not dropped: the feed's resync reads those
 * ids again, and nothing is admitted past the lowered balance once it has.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'bun:test';
import { ChangeBus } from '@gw/core';
import { PgChangeFeed, PgGroupCommitter, openPostgres, type PgHandle } from '@gw/db/pg';
import { RedisHoldStore } from './redis';
import { followBalances } from './follow';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../../../../tests/helpers/postgres';
import { freshPrefix, redisClient, requireRedis } from '../../../../tests/helpers/redis';

const available = (await requirePg('libs/billing/src/holds/follow-feed.test.ts')) && (await requireRedis('libs/billing/src/holds/follow-feed.test.ts'));

/** The follower's ledger reads, counted, and refused on demand (the database refusing a batch's read). */
class Source {
  calls = 0;
  refused = 0;
  down = false;
  constructor(private readonly sink: PgGroupCommitter) {}
  readonly reads = new Proxy(this, {
    get: (_, name) => {
      const fn = (this.sink as unknown as Record<string | symbol, unknown>)[name];
      if (typeof fn !== 'function') return fn;
      return async (...args: unknown[]) => {
        this.calls++;
        if (this.down) {
          this.refused++;
          throw new Error('connection refused (test)');
        }
        return fn.apply(this.sink, args);
      };
    },
  }) as unknown as PgGroupCommitter;
}

describe.skipIf(!available)('followBalances over the PostgreSQL change feed', () => {
  const schema = freshSchema('gw_follow');
  const prefix = freshPrefix('follow');
  let writer: PgHandle;
  let reader: PgHandle;
  let redis: ReturnType<typeof redisClient>;
  let store: RedisHoldStore;
  let source: Source;
  let follower: ReturnType<typeof followBalances>;
  let feed: PgChangeFeed;
  const N = 300;
  let ref = 0;

  beforeAll(async () => {
    writer = await openPostgres(PG_TEST_URL, { schema, max: 2 });
    reader = await openPostgres(PG_TEST_URL, { schema, max: 4 });
    redis = redisClient();
    const sink = new PgGroupCommitter(reader.db);
    store = new RedisHoldStore(redis, (u, k) => sink.mirrors(u, k), { prefix, recoveryMs: 0 });
    await store.recoveryLeft(0);
    source = new Source(sink);
    const bus = new ChangeBus();
    follower = followBalances(bus, store, source.reads);
    // The production resync reloads every cache; the hold mirrors are this test's only one.
    feed = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus, resyncMs: 0, onResync: () => follower.resync() });
  });
  afterAll(async () => {
    await feed?.close();
    follower?.stop();
    if (redis) {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    }
    await Promise.all([writer?.close(), reader?.close()]);
    await dropSchema(schema);
  });

  /** N users with 1,000 each and a limited key of 600; every mirror installed by a live hold of 10. */
  beforeEach(async () => {
    await writer.sql`delete from users`;
    const users = await writer.sql<{ id: string }[]>`
      insert into users (username, password_hash, quota, created_at, updated_at)
      select 'u' || g || '-' || ${++ref}, 'h', 1000, 1, 1 from generate_series(1, ${N}) g returning id`;
    await writer.sql`
      insert into api_keys (user_id, key_hash, prefix, unlimited_quota, remain_quota, created_at, updated_at)
      select id, 'k' || id, 'p', false, 600, 1, 1 from users`;
    await quiet();
    for (const k of await accounts()) {
      const r = await store.reserve({ userId: k.userId, keyId: k.keyId, amount: 10, ref: `r${++ref}`, leaseMs: 60_000 });
      if (!r.ok) throw new Error(`seed reserve refused: ${JSON.stringify(r)}`);
    }
    source.calls = 0;
    source.refused = 0;
  });

  async function accounts(): Promise<Array<{ userId: number; keyId: number; quota: number; remain: number }>> {
    const rows = await writer.sql<{ u: string; k: string; quota: string; remain: string }[]>`
      select u.id as u, k.id as k, u.quota, k.remain_quota as remain from users u join api_keys k on k.user_id = u.id order by u.id`;
    return rows.map((r) => ({ userId: Number(r.u), keyId: Number(r.k), quota: Number(r.quota), remain: Number(r.remain) }));
  }

  /** Until the feed delivered every notification sent so far and its batches ran. */
  async function quiet(): Promise<void> {
    let last = -1;
    while (feed.stats.received !== last) {
      last = feed.stats.received;
      await Bun.sleep(150);
    }
  }

  /**
   * Waits until every user's and key's mirror is the ledger's less the live hold of 10 (nothing held for
   * `loners`); returns the mismatches left.
   */
  async function mirrored(ms: number, loners = new Set<number>()): Promise<string[]> {
    const until = performance.now() + ms;
    for (;;) {
      const want = await accounts();
      const got = await Promise.all(want.map((a) => store.available({ userId: a.userId, keyId: a.keyId })));
      const off = want.flatMap((a, i) => {
        const held = loners.has(a.userId) ? 0 : 10;
        return got[i]!.user === a.quota - held && got[i]!.key === a.remain - held ? [] : [`${a.userId}: ${JSON.stringify(got[i])}`];
      });
      if (!off.length || performance.now() > until) return off;
      await Bun.sleep(50);
    }
  }

  test('a burst of balance moves on every user and key is mirrored, in a few statements rather than one per record', async () => {
    // An operator's bulk adjustment: every user's balance and every key's remaining quota at once.
    await writer.sql`update users set quota = quota - 700, display_name = 'adjusted'`;
    await writer.sql`update api_keys set remain_quota = remain_quota - 300, updated_at = updated_at + 1`;
    expect(await mirrored(20_000)).toEqual([]);
    // 2 × N notifications; batched, they cost a handful of reads (one per batch), not 2 × N.
    expect(source.calls).toBeLessThanOrEqual(20);
    expect(source.calls).toBeGreaterThanOrEqual(2);
  }, 40_000);

  test('a batch whose read fails is resynced, not dropped: mirrors end equal to the ledger and the lowered balance is never overspent', async () => {
    const [first] = await accounts();
    // A user whose mirror is installed but who holds nothing now (not in the holders' index): only the failed
    // batch's own ids bring its mirror back.
    const [loner] = await writer.sql<{ id: string }[]>`
      insert into users (username, password_hash, quota, created_at, updated_at) values ('loner' || ${++ref}, 'h', 1000, 1, 1) returning id`;
    const lonerId = Number(loner!.id);
    await writer.sql`insert into api_keys (user_id, key_hash, prefix, unlimited_quota, remain_quota, created_at, updated_at)
      values (${lonerId}, 'kl' || ${lonerId}, 'p', false, 600, 1, 1)`;
    await quiet();
    const lonerKey = (await accounts()).find((a) => a.userId === lonerId)!.keyId;
    const brief = await store.reserve({ userId: lonerId, keyId: lonerKey, amount: 1, ref: `r${++ref}`, leaseMs: 1 });
    if (!brief.ok) throw new Error('reserve refused');
    await store.release(brief.hold);
    await Bun.sleep(5);
    await store.expired();
    expect(await store.holders()).not.toContain(lonerId);
    expect(await store.available({ userId: lonerId, keyId: lonerKey })).toEqual({ user: 1000, key: 600 });
    source.calls = 0;
    source.down = true;
    await writer.sql`update users set quota = 100, display_name = 'lowered'`;
    await writer.sql`update api_keys set remain_quota = 50, updated_at = updated_at + 1`;
    const t0 = performance.now();
    while (source.refused < 2 && performance.now() - t0 < 10_000) await Bun.sleep(20);
    expect(source.refused).toBeGreaterThanOrEqual(2);
    // The database is back; nothing announces these users again, only the resync can correct them.
    source.down = false;
    expect(await mirrored(15_000, new Set([lonerId]))).toEqual([]);
    expect(await store.available({ userId: lonerId, keyId: lonerKey })).toEqual({ user: 100, key: 50 });
    // 90 left to the user, 40 to the key: the old 990 / 590 admit nothing more.
    const over = await store.reserve({ userId: first!.userId, keyId: first!.keyId, amount: 41, ref: `r${++ref}`, leaseMs: 60_000 });
    expect(over).toMatchObject({ ok: false, reason: 'short', scope: 'key', available: 40 });
    const userOver = await store.reserve({ userId: first!.userId, amount: 91, ref: `r${++ref}`, leaseMs: 60_000 });
    expect(userOver).toMatchObject({ ok: false, reason: 'short', scope: 'user', available: 90 });
    expect((await store.reserve({ userId: first!.userId, keyId: first!.keyId, amount: 40, ref: `r${++ref}`, leaseMs: 60_000 })).ok).toBe(true);
    expect(await store.available({ userId: first!.userId, keyId: first!.keyId })).toEqual({ user: 50, key: 0 });
  }, 40_000);
});
