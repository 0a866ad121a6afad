/**
 * Two leaders at once (a hand-over: the old one has not yet seen its lock go): both reconcilers find the same lapsed
 * hold, whose dead node left two realtime checkpoints under it. Each billed them capped at the whole hold from its own
 * count, so the one that saw the first checkpoint already settled (written as nothing) billed the second in full: the
 * hold was charged beyond itself. Against a real PostgreSQL and Redis, the hold is billed by one of them, exactly up
 * to the hold, and the books agree. So is a hold whose billing a pass left between its two checkpoints (PostgreSQL
 * failing on the second): the next pass had capped the rest at the whole hold again, once the first was deleted.
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

const ready = (await requirePg('tests/cluster/reconciler-overlap.test.ts')) && (await requireRedis('tests/cluster/reconciler-overlap.test.ts'));
const OPENING = 1_000;
const HOLD = 300;
const prefix = freshPrefix('recon-overlap');
let t: PgTestDb;
let redis: Redis;
let sink: PgGroupCommitter;

beforeAll(async () => {
  if (!ready) return;
  t = await openPgTestDb('gw_recon_overlap', { max: 6 });
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

/** One node's reconciler: its settlements go through the shared sink, each delayed as `delayMs` says (or failed). */
function node(store: RedisHoldStore, delayMs: (requestId: string) => number, fail: (requestId: string) => boolean = () => false): HoldReconciler {
  const unfinished: UnfinishedBilling = {
    rows: pgUnfinishedRows(t.handle.sql),
    settle: async (r) => {
      await Bun.sleep(delayMs(r.requestId));
      if (fail(r.requestId)) throw Object.assign(new Error('connection terminated'), { code: 'settlement_unavailable' });
      return sink.settle(r);
    },
  };
  return new HoldReconciler(store, sink, { intervalMs: 60_000, unfinished });
}

describe.skipIf(!ready)('two reconcilers on one lapsed hold', () => {
  test('its checkpoints are billed once, up to the hold; balance = opening + ledger', async () => {
    const { sql, db } = t.handle;
    const user = await new PgUsersRepo(db).insert({ username: 'overlap', passwordHash: 'h', quota: OPENING, createdAt: 1, updatedAt: 1 });
    const key = await new PgApiKeysRepo(db).insert({ userId: user.id, keyHash: 'overlap-key', prefix: 'p', createdAt: 1, updatedAt: 1 });
    const store = new RedisHoldStore(redis, (u, k) => sink.mirrors(u, k), { prefix, recoveryMs: 0 });
    await store.recoveryLeft(0);
    const held = await store.reserve({ userId: user.id, amount: HOLD, ref: 'rt_dead#1', leaseMs: 100, keyId: null });
    expect(held).toMatchObject({ ok: true });
    // The dead node's two responses, 200 each: together beyond the hold, so the second is capped at 100.
    for (const [id, at] of [['rt_dead_r1', 1], ['rt_dead_r2', 2]] as const) {
      await sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at)
        values (${id}, 'rt_dead#1', ${JSON.stringify(row(id, user.id, key.id, 200))}, ${at})`;
    }
    await Bun.sleep(200);
    // Node A settles the first at once and the second late; node B comes to each just after A's first committed.
    const a = node(store, (id) => (id === 'rt_dead_r2' ? 400 : 0));
    const b = node(store, () => 150);
    await Promise.all([a.runOnce(), b.runOnce()]);

    const [books] = await sql<{ quota: string; charged: string; charges: string; usage: string }[]>`
      select u.quota,
        (select coalesce(sum(amount), 0) from ledger l where l.user_id = u.id) as charged,
        (select count(*) from ledger l where l.user_id = u.id and l.kind = 'charge') as charges,
        (select coalesce(sum(cost), 0) from usage_logs g where g.user_id = u.id) as usage
      from users u where u.id = ${user.id}`;
    // Billed exactly up to the hold: 200 + 100 (capped), one charge per response.
    expect(-Number(books!.charged)).toBe(HOLD);
    expect(Number(books!.charges)).toBe(2);
    expect(Number(books!.usage)).toBe(HOLD);
    expect(Number(books!.quota)).toBe(OPENING + Number(books!.charged));
    // Released: nothing in limbo, the checkpoints gone, and the mirror is the ledger's balance.
    expect(await store.expired()).toEqual([]);
    expect(await sql`select 1 from realtime_unfinished`).toHaveLength(0);
    expect((await store.available({ userId: user.id })).user).toBe(OPENING - HOLD);
  }, 20_000);
});

/** The books of one user: what the ledger charged, how many charges, the usage rows' cost, the balance. */
async function books(userId: number) {
  const [b] = await t.handle.sql<{ quota: string; charged: string; charges: string; usage: string }[]>`
    select u.quota,
      (select coalesce(sum(amount), 0) from ledger l where l.user_id = u.id) as charged,
      (select count(*) from ledger l where l.user_id = u.id and l.kind = 'charge') as charges,
      (select coalesce(sum(cost), 0) from usage_logs g where g.user_id = u.id) as usage
    from users u where u.id = ${userId}`;
  return { quota: Number(b!.quota), charged: -Number(b!.charged), charges: Number(b!.charges), usage: Number(b!.usage) };
}

describe.skipIf(!ready)('a pass cut short between two checkpoints of a lapsed hold', () => {
  test('PostgreSQL failing on the second: the next pass bills up to the hold, not past it; balance = opening + ledger', async () => {
    const { sql, db } = t.handle;
    const user = await new PgUsersRepo(db).insert({ username: 'cutshort', passwordHash: 'h', quota: OPENING, createdAt: 1, updatedAt: 1 });
    const key = await new PgApiKeysRepo(db).insert({ userId: user.id, keyHash: 'cutshort-key', prefix: 'p', createdAt: 1, updatedAt: 1 });
    const store = new RedisHoldStore(redis, (u, k) => sink.mirrors(u, k), { prefix: `${prefix}:cut`, recoveryMs: 0 });
    await store.recoveryLeft(0);
    expect(await store.reserve({ userId: user.id, amount: HOLD, ref: 'rt_cut#1', leaseMs: 100, keyId: null })).toMatchObject({ ok: true });
    for (const [id, at] of [['rt_cut_r1', 1], ['rt_cut_r2', 2]] as const) {
      await sql`insert into realtime_unfinished (request_id, hold_ref, row, updated_at)
        values (${id}, 'rt_cut#1', ${JSON.stringify(row(id, user.id, key.id, 200))}, ${at})`;
    }
    await Bun.sleep(200);
    let down = true;
    const leader = node(store, () => 0, (id) => down && id === 'rt_cut_r2');
    // The first pass bills the first checkpoint, fails on the second (and its sweep runs): the hold stays in limbo.
    expect(await leader.runOnce()).toBe(0);
    expect((await books(user.id)).charged).toBe(200);
    down = false;
    expect(await leader.runOnce()).toBe(1);

    const b = await books(user.id);
    expect(b.charged).toBe(HOLD);
    expect(b.charges).toBe(2);
    expect(b.usage).toBe(HOLD);
    expect(b.quota).toBe(OPENING - b.charged);
    expect(await store.expired()).toEqual([]);
    expect(await sql`select 1 from realtime_unfinished where hold_ref = 'rt_cut#1'`).toHaveLength(0);
    expect((await store.available({ userId: user.id })).user).toBe(OPENING - HOLD);
  }, 20_000);
});
