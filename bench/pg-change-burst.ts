/**
 * `bun run bench/pg-change-burst.ts`: how another node's channel snapshot follows channel writes on PostgreSQL
 * (the change feed's path). Node A writes; node B (its own pool, bus and PgChangeFeed) holds a ChannelRegistry.
 * For each N (BENCH_N, default 10,10000):
 * - bulk: N channels inserted in one transaction (an import); how long until B holds every one;
 * - single: BENCH_OPS (default 200) creates, one at a time through ChannelService, with N channels already held:
 *   ms per create on A, and how long after the last one B holds them all;
 * - burst: BENCH_OPS concurrent creates with updates and deletes interleaved; B must end exactly as A.
 */
import { ChangeBus, SecretBox } from '@gw/core';
import { ChannelRegistry, ChannelService } from '@gw/channels';
import { createPgStores, openPostgres, PgChangeFeed, pgSchema } from '@gw/db/pg';
import { PG_TEST_URL, dropSchema, freshSchema } from '../tests/helpers/postgres';

const SIZES = (process.env.BENCH_N ?? '10,10000').split(',').map(Number);
const OPS = Number(process.env.BENCH_OPS ?? 200);
const secrets = new SecretBox(Buffer.from('ab'.repeat(32), 'hex'));
const input = (i: number) => ({ name: `c-${i}`, type: 'openai', base_url: 'http://127.0.0.1:9', key: 'sk-x', models: [`m-${i % 100}`] }) as never;
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

let regA_n = () => 0, regB_n = () => 0;
async function until(cond: () => boolean): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > Number(process.env.BENCH_WAIT ?? 300_000)) throw new Error(`node B never caught up: A ${regA_n()} B ${regB_n()}`);
    await Bun.sleep(2);
  }
}

for (const n of SIZES) {
  const schema = freshSchema('gw_burst');
  const a = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  const b = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  const busA = new ChangeBus();
  const busB = new ChangeBus();
  const storesA = createPgStores(a.db, busA);
  const storesB = createPgStores(b.db, busB);
  const svc = new ChannelService(storesA.channels, secrets, busA);
  const regA = await ChannelRegistry.load(storesA.channels, secrets, busA);
  const regB = await ChannelRegistry.load(storesB.channels, secrets, busB);
  regA_n = () => regA.all().length; regB_n = () => regB.all().length;
  const feed = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: busB, onResync: () => regB.refresh(null), resyncMs: 0 });
  try {
    const sealed = secrets.seal('sk-bulk');
    const now = Math.floor(Date.now() / 1000);
    let t0 = performance.now();
    await a.db.transaction(async (tx) => {
      for (let i = 0; i < n; i += 1000) {
        await tx.insert(pgSchema.channels).values(Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({
          name: `bulk-${i + j}`, type: 'openai', baseUrl: 'http://127.0.0.1:9', key: sealed,
          keys: [{ id: 1, key: sealed, status: 1 as const, reason: '', disabledAt: null, createdAt: now }],
          models: [`m-${(i + j) % 100}`], modelMapping: {}, headers: {}, createdAt: now, updatedAt: now,
        })));
      }
    });
    const inserted = performance.now() - t0;
    await until(() => regB.all().length === n);
    const bulk = performance.now() - t0;

    t0 = performance.now();
    for (let i = 0; i < OPS; i++) await svc.create(input(i));
    const single = performance.now() - t0;
    await until(() => regB.all().length === n + OPS);
    const singleFollow = performance.now() - t0;

    t0 = performance.now();
    const made = await Promise.all(Array.from({ length: OPS }, (_, i) => svc.create(input(OPS + i))));
    await Promise.all(made.map((c, i) => (i % 3 === 0 ? svc.delete(c.id) : i % 3 === 1 ? svc.update({ role: 100 }, { id: c.id, priority: 9 }) : null)));
    // A's registry did not hear the bulk insert (no feed here): the table is the reference.
    const want = (...rows: Array<{ id: number; priority: number }>) => rows.map((c) => `${c.id}:${c.priority}`).sort().join();
    const expected = want(...(await storesA.channels.all()));
    await until(() => want(...regB.all()) === expected);
    const burst = performance.now() - t0;
    console.log(`N=${n}: bulk insert ${s(inserted)}, B holds all after ${s(bulk)} | ${OPS} single creates: ${(single / OPS).toFixed(2)} ms each, B caught up ${s(singleFollow - single)} after the last | burst of ${OPS} creates + updates/deletes: B equal to A after ${s(burst)} | notifications ${feed.stats.received}`);
  } finally {
    await feed.close();
    regA.close();
    regB.close();
    await Promise.all([a.close(), b.close()]);
    await dropSchema(schema);
  }
}
