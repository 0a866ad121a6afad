/**
 * `bun run bench/pg-hold-follow-burst.ts`: how a follower node's hold mirrors (Redis) follow a burst of balance moves
 * committed elsewhere (PostgreSQL change feed → followBalances). BENCH_N users (default 2000), each with a limited
 * key and an installed mirror; then one bulk UPDATE of every user's balance, then one of every key's remaining quota.
 * For each: ms from the commit until every mirror equals the ledger, the follower's ledger statements (each read of
 * its source is one statement) and its Redis commands.
 *
 * Before/after: GW_BENCH_ROOT=<another checkout> runs that checkout's followBalances, change feed and stores (this
 * file only drives them), e.g. `GW_BENCH_ROOT=/tmp/base bun bench/pg-hold-follow-burst.ts`.
 */
import Redis from 'ioredis';
import { PG_TEST_URL, dropSchema, freshSchema } from '../tests/helpers/postgres';
import { REDIS_TEST_URL, freshPrefix } from '../tests/helpers/redis';

const root = process.env.GW_BENCH_ROOT ?? new URL('..', import.meta.url).pathname;
const N = Number(process.env.BENCH_N ?? 2000);
const { ChangeBus } = await import(`${root}/libs/core/src/index.ts`);
const { PgChangeFeed, PgGroupCommitter, openPostgres } = await import(`${root}/libs/db/src/pg.ts`);
const { RedisHoldStore } = await import(`${root}/libs/billing/src/holds/redis.ts`);
const { followBalances } = await import(`${root}/libs/billing/src/holds/follow.ts`);

const schema = freshSchema('gw_holdburst');
const prefix = freshPrefix('holdburst');
const writer = await openPostgres(PG_TEST_URL, { schema, max: 2 });
const reader = await openPostgres(PG_TEST_URL, { schema, max: 10 });
// The follower's connection (its commands counted) and the bench's own (seeding and checking).
const followRedis = new Redis(REDIS_TEST_URL);
const benchRedis = new Redis(REDIS_TEST_URL);
let redisCommands = 0;
const send = followRedis.sendCommand.bind(followRedis);
followRedis.sendCommand = ((...args: Parameters<typeof send>) => { redisCommands++; return send(...args); }) as typeof send;

const sink = new PgGroupCommitter(reader.db);
const load = (u: number, k: number | null) => sink.mirrors(u, k);
let statements = 0;
const source = new Proxy(sink, {
  get(t, name) {
    const v = t[name];
    return typeof v === 'function' ? (...a: unknown[]) => { statements++; return v.apply(t, a); } : v;
  },
});
const followStore = new RedisHoldStore(followRedis, load, { prefix, recoveryMs: 0 });
const benchStore = new RedisHoldStore(benchRedis, load, { prefix, recoveryMs: 0 });
await benchStore.recoveryLeft(0);
const bus = new ChangeBus();
const follower = followBalances(bus, followStore, source);
const resync = () => (typeof follower === 'function' ? undefined : follower.resync());
const feed = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus, resyncMs: 0, onResync: resync });

async function accounts(): Promise<Array<{ userId: number; keyId: number; quota: number; remain: number }>> {
  const rows = await writer.sql`select u.id as u, k.id as k, u.quota, k.remain_quota as remain from users u join api_keys k on k.user_id = u.id`;
  return rows.map((r: Record<string, string>) => ({ userId: Number(r.u), keyId: Number(r.k), quota: Number(r.quota), remain: Number(r.remain) }));
}

/** Until the feed has been silent for 200 ms. */
async function quiet(): Promise<void> {
  let last = -1;
  while (feed.stats.received !== last) {
    last = feed.stats.received;
    await Bun.sleep(200);
  }
}

/** ms from t0 until every mirror matches the ledger. */
async function mirroredAfter(t0: number): Promise<number> {
  const want = await accounts();
  for (;;) {
    const pipe = benchRedis.pipeline();
    for (const a of want) pipe.hget(`${prefix}{u:${a.userId}}:acct`, 'bal').hget(`${prefix}{u:${a.userId}}:k:${a.keyId}`, 'bal');
    const got = (await pipe.exec())!.map(([, v]) => Number(v));
    if (want.every((a, i) => got[2 * i] === a.quota && got[2 * i + 1] === a.remain)) return performance.now() - t0;
    if (performance.now() - t0 > 60_000) throw new Error('mirrors never caught up');
    await Bun.sleep(5);
  }
}

try {
  await writer.sql`insert into users (username, password_hash, quota, created_at, updated_at)
    select 'u' || g, 'h', 100000, 1, 1 from generate_series(1, ${N}) g`;
  await writer.sql`insert into api_keys (user_id, key_hash, prefix, unlimited_quota, remain_quota, created_at, updated_at)
    select id, 'k' || id, 'p', false, 50000, 1, 1 from users`;
  const seeded = await accounts();
  for (let i = 0; i < seeded.length; i += 200) {
    await Promise.all(seeded.slice(i, i + 200).map(async (a, j) => {
      const r = await benchStore.reserve({ userId: a.userId, keyId: a.keyId, amount: 1, ref: `s${i + j}`, leaseMs: 600_000 });
      if (!r.ok) throw new Error(`seed reserve refused: ${JSON.stringify(r)}`);
      await benchStore.release(r.hold);
    }));
  }
  await quiet();
  const report = (what: string, ms: number) => {
    console.log(`${what}: mirrored ${ms.toFixed(0)} ms after the commit | follower: ${statements} PG statements, ${redisCommands} Redis commands | notifications ${feed.stats.received - before}`);
  };
  let before = feed.stats.received;
  statements = 0; redisCommands = 0;
  let t0 = performance.now();
  await writer.sql`update users set quota = quota - 100, display_name = 'adjusted'`;
  report(`${N}-user burst`, await mirroredAfter(t0));
  await quiet();
  before = feed.stats.received;
  statements = 0; redisCommands = 0;
  t0 = performance.now();
  await writer.sql`update api_keys set remain_quota = remain_quota - 100, updated_at = updated_at + 1`;
  report(`${N}-key burst`, await mirroredAfter(t0));
  console.log(`(code under test: ${root})`);
} finally {
  await feed.close();
  if (typeof follower === 'function') follower(); else follower.stop();
  const keys = await benchRedis.keys(`${prefix}*`);
  if (keys.length) await benchRedis.del(...keys);
  followRedis.disconnect();
  benchRedis.disconnect();
  await Promise.all([writer.close(), reader.close()]);
  await dropSchema(schema);
}
