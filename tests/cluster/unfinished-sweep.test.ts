/**
 * The leader's sweep of realtime checkpoints whose request is already settled (its node's delete failed or never
 * came). It kept a settled checkpoint for as long as another checkpoint of the same hold was unsettled (billing that
 * hold once it lapses counts the settled ones against it), so while a sibling never settled the settled rows stayed
 * for good, one more per lost delete. They are now deleted, their cost carried by the hold's unsettled rows in the
 * same statement. Against a real PostgreSQL and Redis: the rows do not pile up, the lapsed hold is still billed
 * exactly up to itself, and a leader that dies after billing and before deleting does not bill it twice.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import type Redis from 'ioredis';
import { HoldReconciler, type UnfinishedBilling } from '@gw/billing';
import { RedisHoldStore } from '@gw/billing/holds/redis';
import { PgGroupCommitter, pgUnfinishedRows } from '@gw/db/pg';
import { PgApiKeysRepo, PgUsersRepo } from '../../libs/db/src/repos-pg';
import type { SettlementRow } from '@gw/db';
import { openPgTestDb, requirePg, type PgTestDb } from '../helpers/postgres';
import { dropPrefix, freshPrefix, redisClient, requireRedis } from '../helpers/redis';

const ready = (await requirePg('tests/cluster/unfinished-sweep.test.ts')) && (await requireRedis('tests/cluster/unfinished-sweep.test.ts'));
const OPENING = 1_000;
const HOLD = 300;
const prefix = freshPrefix('unfinished-sweep');
let t: PgTestDb;
let redis: Redis;
let sink: PgGroupCommitter;

beforeAll(async () => {
  if (!ready) return;
  t = await openPgTestDb('gw_unfinished_sweep', { max: 6 });
  redis = redisClient();
  sink = new PgGroupCommitter(t.handle.db);
});
afterAll(async () => {
  if (!ready) return;
  await sink.close();
  redis.disconnect();
  await dropPrefix(prefix);
  await t.close();
});

const row = (requestId: string, userId: number, apiKeyId: number, cost: number): SettlementRow => ({
  requestId, kind: 'realtime', userId, apiKeyId, channelId: null, model: 'm', upstreamModel: 'm', stream: true, inputTokens: 1, outputTokens: 1,
  cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, longContext: false, audioInputTokens: 0, audioOutputTokens: 0, webSearchRequests: 0,
  codeExecutionRequests: 0, cost, latencyMs: 0, ttftMs: null, status: 200, errorCode: 'gateway_crashed', usageFlag: 'estimated', attempts: 1, ip: '',
  createdAt: 1, group: '', priceRatio: 1000, billedModel: '', overrides: '',
});

const died = async (): Promise<never> => { throw new Error('the leader died here'); };

/** A leader's reconciler; `dies` makes it stop (throw) on deleting a checkpoint once its hold is billed. */
function leader(store: RedisHoldStore, dies = false): HoldReconciler {
  const rows = pgUnfinishedRows(t.handle.sql);
  const unfinished: UnfinishedBilling = {
    // Dead: nothing after the billing runs (neither the delete nor the pass's sweep).
    rows: dies ? { ...rows, remove: died, sweepSettled: died } : rows,
    settle: (r) => sink.settle(r),
  };
  return new HoldReconciler(store, sink, { intervalMs: 60_000, unfinished });
}

async function books(userId: number) {
  const [b] = await t.handle.sql<{ quota: string; charged: string; charges: string; usage: string }[]>`
    select u.quota,
      (select coalesce(sum(amount), 0) from ledger l where l.user_id = u.id) as charged,
      (select count(*) from ledger l where l.user_id = u.id and l.kind = 'charge') as charges,
      (select coalesce(sum(cost), 0) from usage_logs g where g.user_id = u.id) as usage
    from users u where u.id = ${userId}`;
  return { quota: Number(b!.quota), charged: -Number(b!.charged), charges: Number(b!.charges), usage: Number(b!.usage) };
}

const left = async (holdRef: string) => (await t.handle.sql<{ request_id: string; settled_cost: string }[]>`
  select request_id, settled_cost from realtime_unfinished where hold_ref = ${holdRef} order by request_id`).map((r) => [r.request_id, Number(r.settled_cost)]);

describe.skipIf(!ready)('settled checkpoints beside one that never settles', () => {
  test('swept while the hold lives; the hold, lapsed, is billed exactly up to itself, once, across a leader dying mid-way', async () => {
    const { sql, db } = t.handle;
    const user = await new PgUsersRepo(db).insert({ username: 'sweep', passwordHash: 'h', quota: OPENING, createdAt: 1, updatedAt: 1 });
    const key = await new PgApiKeysRepo(db).insert({ userId: user.id, keyHash: 'sweep-key', prefix: 'p', createdAt: 1, updatedAt: 1 });
    const store = new RedisHoldStore(redis, (u, k) => sink.mirrors(u, k), { prefix, recoveryMs: 0 });
    await store.recoveryLeft(0);
    const reserved = await store.reserve({ userId: user.id, amount: HOLD, ref: 'rt_sw#1', leaseMs: 60_000, keyId: null });
    expect(reserved).toMatchObject({ ok: true });
    const hold = (reserved as { hold: Parameters<RedisHoldStore['renew']>[0][number] }).hold;
    const checkpoint = (id: string, cost: number, at: number) => sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at)
      values (${id}, 'rt_sw#1', ${JSON.stringify(row(id, user.id, key.id, cost))}, ${at})`;
    // The response that never settles (its checkpoint 200), and five settled ones of 40 whose deletes were lost.
    await checkpoint('rt_sw_open', 200, 1);
    for (let i = 1; i <= 5; i++) {
      await checkpoint(`rt_sw_done${i}`, 40, 1 + i);
      expect((await sink.settle(row(`rt_sw_done${i}`, user.id, key.id, 40))).inserted).toBe(true);
    }
    // The hold lives: the pass bills nothing and sweeps the settled rows, their cost carried by the open one.
    expect(await leader(store).runOnce()).toBe(0);
    expect(await left('rt_sw#1')).toEqual([['rt_sw_open', 200]]);
    // Another settled one later: swept too, added to what was carried.
    await checkpoint('rt_sw_done6', 50, 10);
    expect((await sink.settle(row('rt_sw_done6', user.id, key.id, 50))).inserted).toBe(true);
    await leader(store).runOnce();
    expect(await left('rt_sw#1')).toEqual([['rt_sw_open', 250]]);
    expect((await books(user.id)).charged).toBe(250);

    // Its node stops renewing: the hold lapses. The leader bills the open checkpoint capped at 300 - 250, then dies
    // before deleting it: the hold stays in limbo, the row stays.
    await store.renew([hold], 1);
    for (let i = 0; i < 100 && (await store.expired()).length === 0; i++) await Bun.sleep(20);
    expect((await store.expired()).map((h) => h.ref)).toEqual(['rt_sw#1']);
    expect(await leader(store, true).runOnce()).toBe(0);
    expect((await books(user.id)).charged).toBe(HOLD);
    expect(await left('rt_sw#1')).toEqual([['rt_sw_open', 250]]);
    // The next leader: the open checkpoint is already billed (counted once), the rest is released.
    expect(await leader(store).runOnce()).toBe(1);
    const b = await books(user.id);
    expect(b).toEqual({ quota: OPENING - HOLD, charged: HOLD, charges: 7, usage: HOLD });
    expect(await left('rt_sw#1')).toEqual([]);
    expect(await store.expired()).toEqual([]);
  }, 20_000);
});
