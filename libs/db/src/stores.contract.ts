/**
 * The storage contract for the multi-statement units of work (the money paths), run against every
 * implementation of `Stores`: SQLite today (stores.test.ts), PostgreSQL with the same suite. Only the
 * interfaces are used; the concurrent cases run their calls at once, so an implementation that
 * checks outside its transaction (or without a row lock) double-spends or double-credits here.
 */
import { expect, test } from 'bun:test';
import type { LedgerRow } from './repos/ledger';
import type { DecideReversal } from './repos/topup-reversals';
import type { Stores } from './stores';

export interface StoresFactory {
  /** A fresh, empty, migrated store set; `close` drops it. */
  open(): Promise<{ stores: Stores; close(): Promise<void> }>;
}

let n = 0;
const uniq = (what: string) => `${what}-${process.pid}-${++n}`;

async function withStores(f: StoresFactory, fn: (s: Stores) => Promise<void>): Promise<void> {
  const { stores, close } = await f.open();
  try {
    await fn(stores);
  } finally {
    await close();
  }
}

async function newUser(s: Stores, balance = 0): Promise<number> {
  const u = await s.ledger.createUserWithOpeningBalance(
    { username: uniq('u'), passwordHash: 'x', createdAt: 1, updatedAt: 1 },
    balance ? { amount: balance, note: 'seed', actorId: null } : null,
  );
  return u.id;
}

const quotaOf = async (s: Stores, id: number) => (await s.users.byId(id))!.quota;

export function storesContract(f: StoresFactory): void {
  test('opening balance: one adjust entry, balance == Σ ledger; none for 0', async () => {
    await withStores(f, async (s) => {
      const rich = await newUser(s, 250);
      const poor = await newUser(s, 0);
      expect(await quotaOf(s, rich)).toBe(250);
      expect(await s.ledger.sum(rich)).toBe(250);
      const entries = await s.ledger.list({ userId: rich, offset: 0, limit: 10 });
      expect(entries.items.map((e) => [e.kind, e.ref, e.amount, e.balanceAfter])).toEqual([['adjust', `user-create:${rich}`, 250, 250]]);
      expect((await s.ledger.list({ userId: poor, offset: 0, limit: 10 })).total).toBe(0);
    });
  });

  test('apply is once per (kind, ref)', async () => {
    await withStores(f, async (s) => {
      const id = await newUser(s);
      expect(await s.ledger.apply({ userId: id, kind: 'topup', amount: 70, ref: 'r1', at: 1 })).toBe(70);
      expect(await s.ledger.apply({ userId: id, kind: 'topup', amount: 70, ref: 'r1', at: 1 })).toBeNull();
      expect(await quotaOf(s, id)).toBe(70);
    });
  });

  test('adjustChecked: concurrent debits never overspend; allowNegative goes below zero; unknown user', async () => {
    await withStores(f, async (s) => {
      const id = await newUser(s, 500);
      const results = await Promise.all(Array.from({ length: 10 }, (_, i) => s.ledger.adjustChecked({
        userId: id, amount: -100, ref: uniq(`d${i}`), note: 'debit', actorId: 1, at: 2, allowNegative: false,
      })));
      expect(results.filter((r) => r.ok)).toHaveLength(5);
      expect(results.filter((r) => !r.ok && r.reason === 'insufficient')).toHaveLength(5);
      expect(await quotaOf(s, id)).toBe(0);
      const below = await s.ledger.adjustChecked({ userId: id, amount: -30, ref: uniq('neg'), note: 'n', actorId: 1, at: 3, allowNegative: true });
      expect(below.ok && (below.entry as LedgerRow).balanceAfter).toBe(-30);
      expect(await s.ledger.sum(id)).toBe(-30);
      expect(await s.ledger.adjustChecked({ userId: 999_999, amount: 5, ref: uniq('x'), note: 'n', actorId: 1, at: 3, allowNegative: false }))
        .toEqual({ ok: false, reason: 'no_user' });
    });
  });

  test('creditTopupOnce: one credit for concurrent and repeated deliveries; a second event for the order is not_pending', async () => {
    await withStores(f, async (s) => {
      const id = await newUser(s);
      const tradeNo = uniq('T');
      await s.topupOrders.insert({ tradeNo, userId: id, provider: 'providerA', amount: 100, currency: 'usd', credit: 1000, createdAt: 1, updatedAt: 1 });
      const paid = (order: { credit: number } | undefined) =>
        order ? { outcome: 'credited', close: 'paid' as const, credit: { amount: order.credit, note: 'paid' } } : { outcome: 'unknown_order' };
      const ev = { provider: 'providerA', eventId: uniq('evt'), type: 'paid', at: 5, tradeNo };
      const results = await Promise.all(Array.from({ length: 5 }, () => s.ledger.creditTopupOnce(ev, paid)));
      expect(results.filter((r) => !r.duplicate)).toEqual([{ duplicate: false, outcome: 'credited', credited: { userId: id, balance: 1000 } }]);
      expect(await s.ledger.creditTopupOnce(ev, paid)).toEqual({ duplicate: true });
      const other = await s.ledger.creditTopupOnce({ ...ev, eventId: uniq('evt') }, paid);
      expect(other).toEqual({ duplicate: false, outcome: 'not_pending:paid', credited: null });
      expect(await quotaOf(s, id)).toBe(1000);
      expect((await s.topupOrders.byTradeNo(tradeNo))!.status).toBe('paid');
      expect((await s.webhookEvents.get('providerA', ev.eventId))!.outcome).toBe('credited');
    });
  });

  test('reverseTopupOnce: concurrent events of one order each see the rows the others wrote (one writer per order)', async () => {
    await withStores(f, async (s) => {
      const id = await newUser(s);
      const tradeNo = uniq('T');
      await s.topupOrders.insert({ tradeNo, userId: id, provider: 'providerA', amount: 100, currency: 'usd', credit: 1000, status: 'paid', paymentRef: uniq('pi'), createdAt: 1, updatedAt: 1 });
      const order = (await s.topupOrders.byTradeNo(tradeNo))!;
      // A rule that takes 10 per reversal row: correct only if each event sees every row committed before it.
      const decide = (key: string): DecideReversal => (o, rows) => {
        if (!o) return { outcome: 'unknown_order' };
        if (rows.some((r) => r.key === key)) return { outcome: 'noop' };
        return { outcome: 'refunded', reversal: { key, state: 'refunded', amount: 10 }, clawedBack: (rows.length + 1) * 100, note: key };
      };
      const ev = (i: number) => ({ provider: 'providerA', eventId: uniq('evt'), type: 'charge.refunded', at: 5, lookup: { paymentRef: order.paymentRef } });
      // Five distinct reversals and five repeats of one of them, all at once.
      const keys = ['a', 'b', 'c', 'd', 'e', 'a', 'a', 'a', 'a', 'a'];
      const results = await Promise.all(keys.map((k, i) => s.ledger.reverseTopupOnce(ev(i), decide(k))));
      expect(results.filter((r) => !r.duplicate && r.outcome === 'refunded')).toHaveLength(5);
      expect(await quotaOf(s, id)).toBe(-500);
      expect((await s.topupOrders.byTradeNo(tradeNo))!.clawedBack).toBe(500);
      expect(await s.ledger.sum(id)).toBe(-500);
      const unknown = await s.ledger.reverseTopupOnce({ ...ev(0), lookup: { paymentRef: 'pi_nobody', tradeNo: '' } }, decide('z'));
      expect(unknown).toEqual({ duplicate: false, outcome: 'unknown_order', moved: null });
      const again = ev(0);
      await s.ledger.reverseTopupOnce(again, decide('f'));
      expect(await s.ledger.reverseTopupOnce(again, decide('g'))).toEqual({ duplicate: true });
      expect(await quotaOf(s, id)).toBe(-600);
    });
  });

  test('creditTopupOnce: a failure inside rolls everything back (event unclaimed, order pending, no credit)', async () => {
    await withStores(f, async (s) => {
      const id = await newUser(s);
      const tradeNo = uniq('T');
      await s.topupOrders.insert({ tradeNo, userId: id, provider: 'providerA', amount: 1, currency: 'usd', credit: 10, createdAt: 1, updatedAt: 1 });
      // The ledger already holds this top-up while the order is pending: the unit of work must refuse whole.
      await s.ledger.apply({ userId: id, kind: 'topup', amount: 10, ref: tradeNo, at: 1 });
      const ev = { provider: 'providerA', eventId: uniq('evt'), type: 'paid', at: 5, tradeNo };
      await expect(s.ledger.creditTopupOnce(ev, () => ({ outcome: 'credited', close: 'paid', credit: { amount: 10, note: '' } }))).rejects.toThrow();
      expect(await s.webhookEvents.get('providerA', ev.eventId)).toBeUndefined();
      expect((await s.topupOrders.byTradeNo(tradeNo))!.status).toBe('pending');
      expect(await quotaOf(s, id)).toBe(10);
    });
  });

  test('redeemCodeOnce: one of many concurrent redemptions credits; expired and unknown codes credit nothing', async () => {
    await withStores(f, async (s) => {
      const batch = uniq('b');
      expect(await s.redemptionCodes.insertBatch([
        { codeHash: `${batch}-live`, prefix: 'gwr_', batch, quota: 777, expiresAt: 100, createdBy: 1, createdAt: 1 },
        { codeHash: `${batch}-old`, prefix: 'gwr_', batch, quota: 5, expiresAt: 10, createdBy: 1, createdAt: 1 },
      ])).toBe(true);
      const users = await Promise.all(Array.from({ length: 20 }, () => newUser(s)));
      const results = await Promise.all(users.map((u) => s.ledger.redeemCodeOnce(`${batch}-live`, u, 50, (c) => `code ${c.prefix}`)));
      const won = results.filter((r) => r !== null);
      expect(won).toHaveLength(1);
      expect(won[0]!.balance).toBe(777);
      expect(await s.ledger.redeemCodeOnce(`${batch}-old`, users[0]!, 50, () => '')).toBeNull();
      expect(await s.ledger.redeemCodeOnce('nope', users[0]!, 50, () => '')).toBeNull();
      const balances = await Promise.all(users.map((u) => quotaOf(s, u)));
      expect(balances.reduce((a, b) => a + b, 0)).toBe(777);
    });
  });
}
