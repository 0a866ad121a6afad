/**
 * `bun run bench/pg-identity-burst.ts`: how another node's user directory, API key index and price book follow bulk
 * writes on PostgreSQL (the change feed's path; bench/pg-change-burst.ts does the same for channels). Node A writes
 * plain SQL, as a bulk operation or an import would; node B (its own pool, bus and PgChangeFeed) holds the caches.
 * For each N (BENCH_N, default 10000), how long until B holds the new state after:
 * - N users and one key each inserted (two statements);
 * - every one of those keys disabled (one UPDATE);
 * - every one of those users disabled (one UPDATE: their keys leave B's index), then re-enabled (their keys are back);
 * - N prices inserted (one statement, an import).
 * Only public APIs of the caches are used, so the same file runs on an older checkout for a before/after.
 */
import { ChangeBus } from '@gw/core';
import { ApiKeyService, UserDirectory } from '@gw/identity';
import { PriceBook } from '@gw/billing';
import { createPgStores, openPostgres, PgChangeFeed } from '@gw/db/pg';
import { PG_TEST_URL, dropSchema, freshSchema } from '../tests/helpers/postgres';

const SIZES = (process.env.BENCH_N ?? '10000').split(',').map(Number);
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

async function until(what: string, cond: () => boolean): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > Number(process.env.BENCH_WAIT ?? 300_000)) throw new Error(`node B never caught up: ${what}`);
    await Bun.sleep(2);
  }
}

for (const n of SIZES) {
  const schema = freshSchema('gw_idburst');
  const a = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  const b = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  const busB = new ChangeBus();
  const storesB = createPgStores(b.db, busB);
  const dir = await UserDirectory.load(storesB.users, busB);
  const keys = await ApiKeyService.load(storesB.apiKeys, storesB.users, dir, busB, { maxKeysPerUser: 0 });
  const prices = await PriceBook.load(storesB.prices, busB);
  const feed = await PgChangeFeed.start({
    url: PG_TEST_URL, schema, bus: busB, resyncMs: 0,
    onResync: async () => { await dir.reloadAll(); await Promise.all([keys.reloadAll(), prices.reloadAll()]); },
  });
  const sql = a.sql;
  try {
    const time = async (what: string, write: () => Promise<unknown>, done: () => boolean) => {
      const t0 = performance.now();
      await write();
      await until(what, done);
      return performance.now() - t0;
    };
    let userIds: number[] = [];
    let keyIds: number[] = [];
    const inserted = await time('inserts', async () => {
      userIds = (await sql<{ id: string }[]>`insert into users (username, password_hash, created_at, updated_at)
        select 'bench-' || g, 'x', 1, 1 from generate_series(1, ${n}) g returning id`).map((r) => Number(r.id));
      keyIds = (await sql<{ id: string }[]>`insert into api_keys (user_id, name, key_hash, prefix, created_at, updated_at)
        select id, 'bench', 'bench-hash-' || id, 'sk-bench', 1, 1 from users where username like 'bench-%' returning id`).map((r) => Number(r.id));
    }, () => keyIds.length === n && keyIds.every((id) => keys.byId(id)?.status === 1));
    const keysOff = await time('keys disabled', () => sql`update api_keys set status = 2 where name = 'bench'`,
      () => keyIds.every((id) => keys.byId(id)?.status === 2));
    const usersOff = await time('users disabled', () => sql`update users set status = 2 where username like 'bench-%'`,
      () => userIds.every((id) => dir.get(id)?.status === 2) && keyIds.every((id) => keys.byId(id) === undefined));
    const usersOn = await time('users re-enabled', () => sql`update users set status = 1 where username like 'bench-%'`,
      () => keyIds.every((id) => keys.byId(id)?.status === 2));
    const priced = await time('prices', () => sql`insert into prices (model, input, output, updated_at)
        select 'bench-model-' || g, 1, 2, 1 from generate_series(1, ${n}) g`,
      () => prices.list().length === n);
    console.log(`N=${n}: users+keys inserted, B holds them after ${s(inserted)} | every key disabled: B after ${s(keysOff)} | every user disabled: B after ${s(usersOff)} | re-enabled: B after ${s(usersOn)} | prices imported: B after ${s(priced)} | notifications ${feed.stats.received}`);
  } finally {
    await feed.close();
    keys.close();
    dir.close();
    await Promise.all([a.close(), b.close()]);
    await dropSchema(schema);
  }
}
