import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ChangeBus, SecretBox } from '@gw/core';
import { createPgStores, openPostgres, PgChangeFeed, pgSchema, type PgHandle } from '@gw/db/pg';
import type { ChannelsStore } from '@gw/db';
import { ChannelRegistry } from './registry';
import { ChannelService } from './service';
import { PG_TEST_URL, dropSchema, freshSchema, requirePg } from '../../../tests/helpers/postgres';

/**
 * Two nodes on one PostgreSQL schema: A writes, B follows through the change feed. A bulk insert announces
 * every row; B must apply them in batches (a few reads), and never end with a stale channel.
 */
const available = await requirePg('libs/channels/src/registry-feed.test.ts');
const schema = freshSchema('gw_regfeed');
const secrets = new SecretBox(Buffer.from('cd'.repeat(32), 'hex'));
let a: PgHandle;
let b: PgHandle;
let service: ChannelService;
let storeA: ChannelsStore;
let registryB: ChannelRegistry;
let feed: PgChangeFeed;
/** B's reads of changed channels (byId or byIds calls). */
let readsB = 0;

beforeAll(async () => {
  if (!available) return;
  a = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  b = await openPostgres(PG_TEST_URL, { schema, max: 4 });
  const busA = new ChangeBus();
  const busB = new ChangeBus();
  storeA = createPgStores(a.db, busA).channels;
  service = new ChannelService(storeA, secrets, busA);
  const real = createPgStores(b.db, busB).channels;
  const counted = Object.assign(Object.create(real), {
    byId: (id: number) => { readsB++; return real.byId(id); },
    byIds: (ids: number[]) => { readsB++; return real.byIds(ids); },
  }) as ChannelsStore;
  registryB = await ChannelRegistry.load(counted, secrets, busB);
  feed = await PgChangeFeed.start({ url: PG_TEST_URL, schema, bus: busB, onResync: () => registryB.refresh(null), resyncMs: 0 });
});

afterAll(async () => {
  if (!available) return;
  await feed?.close();
  registryB?.close();
  await Promise.all([a?.close(), b?.close()]);
  await dropSchema(schema);
});

async function until(ms: number, cond: () => boolean): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await Bun.sleep(10);
  }
}

/** id:priority:status of every channel, as the table holds them and as B's snapshot does. */
const state = (rows: Array<{ id: number; priority: number; status: number }>) => rows.map((c) => `${c.id}:${c.priority}:${c.status}`).sort().join();

describe.skipIf(!available)('ChannelRegistry following another node (PostgreSQL)', () => {
  test('a bulk insert of 2000 channels is applied in a few reads, not one per row', async () => {
    const sealed = secrets.seal('sk-bulk');
    const now = Math.floor(Date.now() / 1000);
    const before = readsB;
    await a.db.insert(pgSchema.channels).values(Array.from({ length: 2000 }, (_, i) => ({
      name: `bulk-${i}`, type: 'openai', baseUrl: 'http://127.0.0.1:9', key: sealed,
      keys: [{ id: 1, key: sealed, status: 1 as const, reason: '', disabledAt: null, createdAt: now }],
      models: [`m-${i % 10}`], modelMapping: {}, headers: {}, createdAt: now, updatedAt: now,
    })));
    await until(15_000, () => registryB.all().length === 2000);
    // Generous: one per burst B happened to split the notifications into; the old path made 2000.
    expect(readsB - before).toBeLessThan(200);
    expect(registryB.candidates('m-3', 'default')).toHaveLength(200);
  }, 30_000);

  test('creates, updates and deletes interleaved in a burst end in the right state on the other node', async () => {
    const made = await Promise.all(Array.from({ length: 60 }, (_, i) =>
      service.create({ name: `burst-${i}`, type: 'openai', base_url: 'http://127.0.0.1:9', key: 'sk-burst', models: ['burst-model'] } as never)));
    await Promise.all(made.map(async (c, i) => {
      if (i % 3 === 0) await service.delete(c.id);
      else if (i % 3 === 1) {
        await service.update({ role: 100 }, { id: c.id, priority: 7 });
        await service.update({ role: 100 }, { id: c.id, status: 2 });
      }
    }));
    // A channel created and at once deleted, in the same burst, too.
    const gone = await service.create({ name: 'short-lived', type: 'openai', base_url: 'http://127.0.0.1:9', key: 'sk-x', models: ['burst-model'] } as never);
    await service.delete(gone.id);
    const expected = state(await storeA.all());
    await until(15_000, () => state(registryB.all()) === expected);
    expect(registryB.get(gone.id)).toBeUndefined();
    // Deleted (i % 3 == 0) and disabled (i % 3 == 1) ones are not routed; the other 20 are.
    expect(registryB.candidates('burst-model', 'default').map((c) => c.name).sort()).toEqual(
      made.filter((_, i) => i % 3 === 2).map((c) => c.name).sort());
    expect(registryB.get(made[1]!.id)?.priority).toBe(7);
  }, 30_000);
});
