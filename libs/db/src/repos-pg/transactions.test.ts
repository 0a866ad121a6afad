/**
 * What only a pooled, concurrent backend can get wrong: statements given a transaction must run in
 * it (SQLite's repos joined "the connection's open transaction"; a pool has no such thing), and the
 * "exactly once" guards must hold when several connections race under READ COMMITTED.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ChangeBus } from '@gw/core';
import type { PgHandle } from '../pg/client';
import {
  PgAlertOutboxRepo, PgApiKeysRepo, PgBudgetChargesRepo, PgBudgetsRepo, PgLedgerRepo, PgRedemptionCodesRepo, PgSecurityRepo, PgSettlementsRepo, PgTopupOrdersRepo, PgUsageLogsRepo,
  PgUsersRepo, PgWebhookEventsRepo,
} from './index';
import type { SettlementRow } from '../repos/settlements';
import { openPgTestDb, requirePg, type PgTestDb } from '../../../../tests/helpers/postgres';

const available = await requirePg('libs/db/src/repos-pg/transactions.test.ts');
const N = 8;
let t: PgTestDb;
let h: PgHandle;

beforeAll(async () => {
  if (!available) return;
  t = await openPgTestDb('gw_repotx', { max: N });
  h = t.handle;
});
afterAll(async () => {
  if (available) await t?.close();
});

let seq = 0;
const newUser = (quota = 0) => new PgUsersRepo(h.db).insert({ username: `tx${++seq}`, passwordHash: 'h', quota, createdAt: 1, updatedAt: 1 });
const settlement = (userId: number, apiKeyId: number, over: Partial<SettlementRow> = {}): SettlementRow => ({
  requestId: `tx-req-${++seq}`, kind: 'messages', userId, apiKeyId, channelId: null, model: 'm', upstreamModel: 'm', stream: false,
  inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, cost: 10,
  latencyMs: 1, ttftMs: null, status: 200, errorCode: '', attempts: 1, ip: '', createdAt: 100, ...over,
});
/** Starts every call at once on its own connection; resolves with all results. */
const race = <T>(n: number, fn: (i: number) => Promise<T>) => Promise.all(Array.from({ length: n }, (_, i) => fn(i)));
/**
 * Races the calls while `table` refuses writes (EXCLUSIVE still lets plain reads through): every
 * contender gets past its reads before any can write, so a check-then-write that is not serialised
 * would let them all through. A fast machine alone would often run them one after another.
 */
async function raceBlocked<T>(table: string, n: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  let results!: Promise<T[]>;
  await h.sql.begin(async (s) => {
    await s`lock table ${s(table)} in exclusive mode`;
    results = race(n, fn);
    results.catch(() => {}); // observed below, after the lock is released
    await Bun.sleep(300);
  });
  return results;
}
/** Ledger rows of a user in order: each balance_after must be the previous one plus its amount. */
async function ledgerChain(userId: number, opening: number) {
  const rows = await h.sql<{ amount: string; balance_after: string }[]>`select amount, balance_after from ledger where user_id = ${userId} order by id`;
  let bal = opening;
  for (const r of rows) {
    bal += Number(r.amount);
    expect(Number(r.balance_after)).toBe(bal);
  }
  return { rows: rows.length, balance: bal };
}

class Rollback extends Error {}

describe.skipIf(!available)('PostgreSQL repos: a transaction argument is used', () => {
  test('every write given `tx` is undone by its rollback, and no balance event is emitted for it', async () => {
    const bus = new ChangeBus();
    const seen: unknown[] = [];
    bus.on('balance.changed', (p) => { seen.push(p); });
    const ledger = new PgLedgerRepo(h.db, bus);
    const u = await newUser(1_000);
    const k = await new PgApiKeysRepo(h.db).insert({ userId: u.id, keyHash: `k${++seq}`, prefix: 'p', createdAt: 1, updatedAt: 1 });
    const orders = new PgTopupOrdersRepo(h.db);
    await orders.insert({ tradeNo: 'TX1', userId: u.id, provider: 'stripe', amount: 1, currency: 'usd', credit: 5, createdAt: 1, updatedAt: 1 });
    const codes = new PgRedemptionCodesRepo(h.db);
    await codes.insertBatch([{ codeHash: 'txc', prefix: 'p', batch: 'txb', quota: 5, expiresAt: 1e12, createdBy: 1, createdAt: 1 }]);
    const events = new PgWebhookEventsRepo(h.db);
    const req = settlement(u.id, k.id);

    const inside: unknown[] = [];
    await expect(h.db.transaction(async (tx) => {
      inside.push(await ledger.apply({ userId: u.id, kind: 'topup', amount: 5, ref: 'TX1', at: 2 }, tx));
      inside.push(await events.claim({ provider: 'stripe', eventId: 'evt-tx', type: 't', at: 2 }, tx));
      await events.setOutcome('stripe', 'evt-tx', 'credited', tx);
      inside.push((await orders.closePending('TX1', 'paid', 2, tx))?.status);
      inside.push((await orders.byTradeNo('TX1', tx))?.status);
      inside.push((await codes.claim('txc', u.id, 2, tx))?.status);
      inside.push((await codes.byHash('txc', tx))?.status);
      inside.push(await new PgUsageLogsRepo(h.db).insertOnce({ requestId: 'tx-log', userId: u.id, apiKeyId: k.id, model: 'm', status: 200, createdAt: 2 }, tx));
      inside.push(await new PgSettlementsRepo(h.db).apply(req, tx));
      throw new Rollback();
    })).rejects.toBeInstanceOf(Rollback);
    // Inside, each statement saw the ones before it (same transaction)...
    // The settlement read back the balance it left and its version (the top-up and the charge each bumped it).
    expect(inside).toEqual([1_005, true, 'paid', 'paid', 'redeemed', 'redeemed', true, { inserted: true, balance: 995, mirror: { user: { balance: 995, version: 2 } } }]);
    // ...and after the rollback none of them happened.
    expect((await new PgUsersRepo(h.db).byId(u.id))!.quota).toBe(1_000);
    expect(await ledger.sum(u.id)).toBe(0);
    expect(await events.get('stripe', 'evt-tx')).toBeUndefined();
    expect((await orders.byTradeNo('TX1'))!.status).toBe('pending');
    expect((await codes.byHash('txc'))!.status).toBe('unused');
    expect(await new PgUsageLogsRepo(h.db).byRequestId('tx-log')).toBeUndefined();
    expect(await new PgUsageLogsRepo(h.db).byRequestId(req.requestId)).toBeUndefined();
    expect((await new PgApiKeysRepo(h.db).byId(k.id))!.lastUsedAt).toBeNull();
    expect(seen).toEqual([]);
  });
});

describe.skipIf(!available)('PostgreSQL repos: exactly once under concurrent connections', () => {
  test('budget charges and alerts join the settlement transaction; concurrent charges are all counted', async () => {
    const budgets = new PgBudgetsRepo(h.db);
    const charges = new PgBudgetChargesRepo(h.db);
    const b = await budgets.insert({ scope: 'user', subjectId: (await newUser()).id, period: 'monthly', limitAmount: 1_000, createdAt: 1, updatedAt: 1 });
    const outboxEvent = `tx-alert-${seq}`;
    await expect(h.db.transaction(async (tx) => {
      expect(await charges.charge(b.id, '2026-03', 900, tx)).toEqual({ spent: 900, alerted: 0, limitAmount: 1_000, periodKey: '2026-03' });
      await charges.markAlerted(b.id, 1, tx);
      await charges.enqueue({ eventId: outboxEvent, type: 't', payload: '{}', status: 'pending', nextAttemptAt: 0, createdAt: 1 }, tx);
      throw new Rollback();
    })).rejects.toBeInstanceOf(Rollback);
    expect(await budgets.byId(b.id)).toMatchObject({ spent: 0, alerted: 0, periodKey: '' });
    expect((await new PgAlertOutboxRepo(h.db).list({ offset: 0, limit: 100 })).items.some((a) => a.eventId === outboxEvent)).toBe(false);
    // The first charge of the period and N-1 more race; each must land on the one before it.
    const results = await raceBlocked('budgets', N, (i) => h.db.transaction((tx) => charges.charge(b.id, '2026-03', i + 1, tx)));
    expect(results.map((r) => r!.spent).sort((x, y) => x - y).at(-1)).toBe((N * (N + 1)) / 2);
    expect((await budgets.byId(b.id))!.spent).toBe((N * (N + 1)) / 2);
  });

  test(`ledger: ${N} concurrent applies of one (kind, ref) credit once; distinct refs all apply with an exact balance_after chain`, async () => {
    const ledger = new PgLedgerRepo(h.db);
    const u = await newUser();
    const same = await raceBlocked('ledger', N, () => ledger.apply({ userId: u.id, kind: 'topup', amount: 700, ref: 'once', at: 1 }));
    expect(same.filter((b) => b !== null)).toEqual([700]);
    const distinct = await race(N, (i) => ledger.apply({ userId: u.id, kind: 'adjust', amount: i + 1, ref: `d${i}`, at: 2 }));
    expect(distinct.every((b) => b !== null)).toBe(true);
    const total = 700 + (N * (N + 1)) / 2;
    expect(await ledgerChain(u.id, 0)).toEqual({ rows: N + 1, balance: total });
    expect((await new PgUsersRepo(h.db).byId(u.id))!.quota).toBe(total);
    expect(await ledger.sum(u.id)).toBe(total);
  });

  test('settlements: concurrent transactions settle a request id once and charge distinct ones exactly', async () => {
    const settlements = new PgSettlementsRepo(h.db);
    const u = await newUser(1_000_000);
    const k = await new PgApiKeysRepo(h.db).insert({ userId: u.id, keyHash: `k${++seq}`, prefix: 'p', unlimitedQuota: false, remainQuota: 500, createdAt: 1, updatedAt: 1 });
    const one = settlement(u.id, k.id, { cost: 100 });
    const dup = await raceBlocked('usage_logs', N, () => h.db.transaction((tx) => settlements.apply(one, tx)));
    expect(dup.filter((r) => r.inserted)).toEqual([{ inserted: true, balance: 999_900, mirror: { user: { balance: 999_900, version: 1 }, key: { balance: 400, version: 1 } } }]);
    const many = await race(N, (i) => h.db.transaction((tx) => settlements.apply(settlement(u.id, k.id, { cost: i + 1, createdAt: 100 + i }), tx)));
    expect(many.every((r) => r.inserted)).toBe(true);
    const charged = 100 + (N * (N + 1)) / 2;
    expect(await ledgerChain(u.id, 1_000_000)).toEqual({ rows: N + 1, balance: 1_000_000 - charged });
    expect(await new PgUsersRepo(h.db).byId(u.id)).toMatchObject({ quota: 1_000_000 - charged, usedQuota: charged, requestCount: N + 1 });
    expect(await new PgApiKeysRepo(h.db).byId(k.id)).toMatchObject({ usedQuota: charged, remainQuota: 500 - charged, lastUsedAt: 100 + N - 1 });
  });

  test('webhook event, top-up order, redemption code, backup code, TOTP step: one winner each', async () => {
    const u = await newUser();
    const events = new PgWebhookEventsRepo(h.db);
    const claims = await raceBlocked('webhook_events', N, () => h.db.transaction((tx) => events.claim({ provider: 'stripe', eventId: 'evt-race', type: 't', at: 1 }, tx)));
    expect(claims.filter(Boolean).length).toBe(1);

    const orders = new PgTopupOrdersRepo(h.db);
    await orders.insert({ tradeNo: 'RACE', userId: u.id, provider: 'stripe', amount: 1, currency: 'usd', credit: 5, createdAt: 1, updatedAt: 1 });
    const closed = await race(N, (i) => orders.closePending('RACE', i % 2 ? 'paid' : 'failed', 2));
    expect(closed.filter((o) => o !== undefined).length).toBe(1);

    const codes = new PgRedemptionCodesRepo(h.db);
    await codes.insertBatch([{ codeHash: 'race-code', prefix: 'p', batch: 'race', quota: 5, expiresAt: 1e12, createdBy: 1, createdAt: 1 }]);
    const redeemed = await race(N, (i) => codes.claim('race-code', u.id + i, 2));
    expect(redeemed.filter((c) => c !== undefined).length).toBe(1);

    const security = new PgSecurityRepo(h.db);
    await security.replaceBackupCodes(u.id, ['bc'], 1);
    expect((await race(N, () => security.consumeBackupCode(u.id, 'bc', 2))).filter(Boolean).length).toBe(1);
    expect((await race(N, () => security.claimTotpStep(u.id, 42))).filter(Boolean).length).toBe(1);
  });

  test('redemption: concurrent batches with one name create exactly one (the advisory lock stands in for BEGIN IMMEDIATE)', async () => {
    const codes = new PgRedemptionCodesRepo(h.db);
    const made = await raceBlocked('redemption_codes', N, (i) => codes.insertBatch([0, 1, 2].map((j) => ({
      codeHash: `same-${i}-${j}`, prefix: 'p', batch: 'same-name', quota: 1, expiresAt: 1e12, createdBy: 1, createdAt: 1,
    }))));
    expect(made.filter(Boolean).length).toBe(1);
    expect((await codes.list({ batch: 'same-name', at: 0, offset: 0, limit: 100 })).total).toBe(3);
  });

  test('login failures from concurrent requests are all counted: 2 x maxFailures locks twice', async () => {
    const u = await newUser();
    const security = new PgSecurityRepo(h.db);
    const locks = await race(6, () => security.recordLoginFailure(u.id, { maxFailures: 3, lockSeconds: 10 }, 1_000_000));
    expect(locks.filter((l) => l > 0).sort()).toEqual([1_010, 1_020]);
    expect(await new PgUsersRepo(h.db).byId(u.id)).toMatchObject({ failedLogins: 0, lockCount: 2 });
  });
});
