import { describe, expect, test } from 'bun:test';
import type { ContractRepos, MakeEnv } from './env';
import { BIG, useEnv } from './setup';

type NewOrder = Parameters<ContractRepos['topupOrders']['insert']>[0];
const order = (tradeNo: string, over: Partial<NewOrder> = {}): NewOrder => ({
  tradeNo, userId: 1, provider: 'stripe', amount: 500, currency: 'usd', credit: BIG, createdAt: 1, updatedAt: 1, ...over,
});

type NewCode = Parameters<ContractRepos['redemptionCodes']['insertBatch']>[0][number];
const code = (codeHash: string, batch: string, over: Partial<NewCode> = {}): NewCode => ({
  codeHash, prefix: codeHash.slice(0, 4), batch, quota: 1_000, expiresAt: 100, createdBy: 1, createdAt: 10, ...over,
});

/** Top-up orders, webhook event ids, redemption codes. */
export function paymentsContract(make: MakeEnv): void {
  describe('topup orders', () => {
    const env = useEnv(make);

    test('insert with defaults; unique trade number; byTradeNo', async () => {
      const { topupOrders } = env().repos;
      const o = await topupOrders.insert(order('T1'));
      expect(o).toMatchObject({ tradeNo: 'T1', status: 'pending', providerRef: '', checkoutUrl: '', credit: BIG, paidAt: null });
      expect(await topupOrders.byTradeNo('T1')).toEqual(o);
      expect(await topupOrders.byTradeNo('T2')).toBeUndefined();
      await expect((async () => topupOrders.insert(order('T1')))()).rejects.toThrow();
    });

    test('attachCheckout and closePending act only on a pending order, once', async () => {
      const { topupOrders } = env().repos;
      await topupOrders.insert(order('T1'));
      await topupOrders.insert(order('T2'));
      expect(await topupOrders.attachCheckout('T1', 'cs_1', 'https://pay/1', 5)).toMatchObject({ providerRef: 'cs_1', checkoutUrl: 'https://pay/1', updatedAt: 5 });
      expect(await topupOrders.closePending('T1', 'paid', 6)).toMatchObject({ status: 'paid', paidAt: 6, updatedAt: 6 });
      expect(await topupOrders.closePending('T1', 'failed', 7)).toBeUndefined();
      expect(await topupOrders.attachCheckout('T1', 'cs_2', 'x', 8)).toBeUndefined();
      expect(await topupOrders.closePending('T2', 'expired', 9)).toMatchObject({ status: 'expired', paidAt: null, updatedAt: 9 });
      expect(await topupOrders.closePending('nope', 'paid', 9)).toBeUndefined();
      expect(await topupOrders.byTradeNo('T1')).toMatchObject({ status: 'paid', providerRef: 'cs_1' });
    });

    test('failUnstarted fails only pending orders of its provider without a checkout id, created by the cutoff', async () => {
      const { topupOrders } = env().repos;
      await topupOrders.insert(order('OLD', { createdAt: 10 }));
      await topupOrders.insert(order('EDGE', { createdAt: 20 }));
      await topupOrders.insert(order('NEW', { createdAt: 21 }));
      await topupOrders.insert(order('STARTED', { createdAt: 10, providerRef: 'cs_1' }));
      await topupOrders.insert(order('OTHER', { createdAt: 10, provider: 'epay' }));
      await topupOrders.insert(order('PAID', { createdAt: 10, status: 'paid' }));
      expect((await topupOrders.failUnstarted('stripe', 20, 30)).sort()).toEqual(['EDGE', 'OLD']);
      expect(await topupOrders.byTradeNo('OLD')).toMatchObject({ status: 'failed', updatedAt: 30, paidAt: null });
      for (const t of ['NEW', 'STARTED', 'OTHER']) expect((await topupOrders.byTradeNo(t))!.status).toBe('pending');
      expect((await topupOrders.byTradeNo('PAID'))!.status).toBe('paid');
      expect(await topupOrders.failUnstarted('stripe', 20, 31)).toEqual([]);
    });

    test('expireStale expires only pending orders of its provider with a checkout id, created by the cutoff', async () => {
      const { topupOrders } = env().repos;
      await topupOrders.insert(order('OLD', { createdAt: 10, providerRef: 'ch_1' }));
      await topupOrders.insert(order('EDGE', { createdAt: 20, providerRef: 'ch_2' }));
      await topupOrders.insert(order('NEW', { createdAt: 21, providerRef: 'ch_3' }));
      await topupOrders.insert(order('UNSTARTED', { createdAt: 10 }));
      await topupOrders.insert(order('OTHER', { createdAt: 10, provider: 'epay', providerRef: 'ch_4' }));
      await topupOrders.insert(order('PAID', { createdAt: 10, status: 'paid', providerRef: 'ch_5' }));
      expect((await topupOrders.expireStale('stripe', 20, 30)).sort()).toEqual(['EDGE', 'OLD']);
      expect(await topupOrders.byTradeNo('OLD')).toMatchObject({ status: 'expired', updatedAt: 30, paidAt: null });
      for (const t of ['NEW', 'UNSTARTED', 'OTHER']) expect((await topupOrders.byTradeNo(t))!.status).toBe('pending');
      expect((await topupOrders.byTradeNo('PAID'))!.status).toBe('paid');
      expect(await topupOrders.expireStale('stripe', 20, 31)).toEqual([]);
    });

    test('expireOrphaned expires the pending orders of every provider not configured, once past the age guard', async () => {
      const { topupOrders } = env().repos;
      await topupOrders.insert(order('KEPT', { createdAt: 10, providerRef: 'ch_1' }));
      await topupOrders.insert(order('GONE', { createdAt: 20, provider: 'epay', providerRef: 'ch_2' }));
      await topupOrders.insert(order('GONE2', { createdAt: 10, provider: 'epay' }));
      await topupOrders.insert(order('GONEPAID', { createdAt: 10, provider: 'epay', status: 'paid' }));
      // Created after the guard (a node with the provider configured made it a moment ago): left pending.
      await topupOrders.insert(order('YOUNG', { createdAt: 25, provider: 'epay', providerRef: 'ch_3' }));
      const out = await topupOrders.expireOrphaned(['stripe'], 20, 30);
      expect(out.sort((a, b) => a.tradeNo.localeCompare(b.tradeNo))).toEqual([{ tradeNo: 'GONE', provider: 'epay' }, { tradeNo: 'GONE2', provider: 'epay' }]);
      expect((await topupOrders.byTradeNo('KEPT'))!.status).toBe('pending');
      expect((await topupOrders.byTradeNo('YOUNG'))!.status).toBe('pending');
      expect((await topupOrders.byTradeNo('GONEPAID'))!.status).toBe('paid');
      expect(await topupOrders.byTradeNo('GONE')).toMatchObject({ status: 'expired', updatedAt: 30 });
      expect(await topupOrders.expireOrphaned(['stripe'], 20, 31)).toEqual([]);
      expect(await topupOrders.expireOrphaned(['stripe'], 25, 32)).toEqual([{ tradeNo: 'YOUNG', provider: 'epay' }]);
    });

    test('list filters by user, status and provider, newest first, paged', async () => {
      const { topupOrders } = env().repos;
      await topupOrders.insert(order('A', { userId: 1 }));
      await topupOrders.insert(order('B', { userId: 2, provider: 'epay' }));
      await topupOrders.insert(order('C', { userId: 1, status: 'paid' }));
      await topupOrders.insert(order('D', { userId: 1 }));
      const trades = async (f: Record<string, unknown>) => {
        const res = await topupOrders.list({ offset: 0, limit: 10, ...f });
        return [res.items.map((x) => x.tradeNo), res.total];
      };
      expect(await trades({})).toEqual([['D', 'C', 'B', 'A'], 4]);
      expect(await trades({ userId: 1 })).toEqual([['D', 'C', 'A'], 3]);
      expect(await trades({ status: 'pending', userId: 1 })).toEqual([['D', 'A'], 2]);
      expect(await trades({ provider: 'epay' })).toEqual([['B'], 1]);
      expect(await trades({ status: '', provider: '' })).toEqual([['D', 'C', 'B', 'A'], 4]);
      expect(await trades({ offset: 1, limit: 2 })).toEqual([['C', 'B'], 4]);
    });
  });

  describe('webhook events', () => {
    const env = useEnv(make);

    test('an event id is claimed once per provider; the outcome is recorded', async () => {
      const { webhookEvents } = env().repos;
      const e = { provider: 'stripe', eventId: 'evt_1', type: 'checkout.session.completed', at: 5 };
      expect(await webhookEvents.claim(e)).toBe(true);
      expect(await webhookEvents.claim({ ...e, type: 'other', at: 6 })).toBe(false);
      expect(await webhookEvents.claim({ ...e, provider: 'epay' })).toBe(true);
      expect(await webhookEvents.get('stripe', 'evt_1')).toMatchObject({ provider: 'stripe', eventId: 'evt_1', type: e.type, outcome: 'processing', receivedAt: 5 });
      await webhookEvents.setOutcome('stripe', 'evt_1', 'credited');
      expect((await webhookEvents.get('stripe', 'evt_1'))!.outcome).toBe('credited');
      expect((await webhookEvents.get('epay', 'evt_1'))!.outcome).toBe('processing');
      expect(await webhookEvents.get('stripe', 'evt_2')).toBeUndefined();
    });
  });

  describe('redemption codes', () => {
    const env = useEnv(make);

    test('insertBatch writes all codes or none: a repeated batch name, or a duplicate hash inside, writes nothing', async () => {
      const { redemptionCodes } = env().repos;
      expect(await redemptionCodes.insertBatch([])).toBe(true);
      expect(await redemptionCodes.insertBatch([code('h1', 'b1'), code('h2', 'b1', { quota: BIG })])).toBe(true);
      expect(await redemptionCodes.insertBatch([code('h3', 'b1')])).toBe(false);
      expect(await redemptionCodes.byHash('h3')).toBeUndefined();
      await expect((async () => redemptionCodes.insertBatch([code('h4', 'b2'), code('h1', 'b2')]))()).rejects.toThrow();
      expect(await redemptionCodes.byHash('h4')).toBeUndefined();
      expect(await redemptionCodes.batchExists('b2')).toBe(false);
      expect(await redemptionCodes.batchExists('b1')).toBe(true);
      expect(await redemptionCodes.byHash('h2')).toMatchObject({ batch: 'b1', quota: BIG, status: 'unused', redeemedBy: null, redeemedAt: null });
    });

    test('claim succeeds once, only while unused and unexpired; revokeBatch revokes only unused codes', async () => {
      const { redemptionCodes } = env().repos;
      await redemptionCodes.insertBatch([code('h1', 'b'), code('h2', 'b'), code('h3', 'b', { expiresAt: 50 })]);
      expect(await redemptionCodes.claim('h1', 7, 60)).toMatchObject({ status: 'redeemed', redeemedBy: 7, redeemedAt: 60 });
      expect(await redemptionCodes.claim('h1', 8, 61)).toBeUndefined();
      expect(await redemptionCodes.claim('h3', 7, 50)).toBeUndefined(); // expires at 50: not after
      expect(await redemptionCodes.claim('nope', 7, 1)).toBeUndefined();
      expect(await redemptionCodes.revokeBatch('b')).toBe(2);
      expect(await redemptionCodes.revokeBatch('b')).toBe(0);
      expect(await redemptionCodes.claim('h2', 7, 1)).toBeUndefined();
      expect((await redemptionCodes.byHash('h1'))!.status).toBe('redeemed');
      expect((await redemptionCodes.byHash('h3'))!.status).toBe('revoked');
    });

    test('list by batch and by read status (unused/expired depend on the time), newest first, paged', async () => {
      const { redemptionCodes } = env().repos;
      await redemptionCodes.insertBatch([code('a1', 'A', { expiresAt: 100 }), code('a2', 'A', { expiresAt: 200 }), code('a3', 'A', { expiresAt: 300 })]);
      await redemptionCodes.insertBatch([code('b1', 'B', { expiresAt: 100 })]);
      await redemptionCodes.claim('a3', 1, 10);
      const hashes = async (f: Record<string, unknown>) => {
        const res = await redemptionCodes.list({ at: 150, offset: 0, limit: 10, ...f });
        return [res.items.map((x) => x.codeHash), res.total];
      };
      expect(await hashes({})).toEqual([['b1', 'a3', 'a2', 'a1'], 4]);
      expect(await hashes({ batch: 'A' })).toEqual([['a3', 'a2', 'a1'], 3]);
      expect(await hashes({ status: 'unused' })).toEqual([['a2'], 1]);
      expect(await hashes({ status: 'expired' })).toEqual([['b1', 'a1'], 2]);
      expect(await hashes({ status: 'expired', at: 100 })).toEqual([['b1', 'a1'], 2]);
      expect(await hashes({ status: 'expired', at: 99 })).toEqual([[], 0]);
      expect(await hashes({ status: 'redeemed', batch: 'A' })).toEqual([['a3'], 1]);
      expect(await hashes({ offset: 1, limit: 2 })).toEqual([['a3', 'a2'], 4]);
    });

    test('batches: counts by status per batch, newest batch first, numbers not strings', async () => {
      const { redemptionCodes } = env().repos;
      await redemptionCodes.insertBatch([code('a1', 'A', { expiresAt: 100, createdAt: 5 }), code('a2', 'A', { expiresAt: 200, createdAt: 6 }), code('a3', 'A', { expiresAt: 300, createdAt: 7 })]);
      await redemptionCodes.insertBatch([code('b1', 'B', { quota: BIG, expiresAt: 100, createdAt: 9 })]);
      await redemptionCodes.insertBatch([code('c1', 'C')]);
      await redemptionCodes.claim('a3', 1, 10);
      await redemptionCodes.revokeBatch('C');
      const res = await redemptionCodes.batches(150, 0, 10);
      expect(res.total).toBe(3);
      expect(res.items).toEqual([
        { batch: 'C', quota: 1_000, total: 1, unused: 0, redeemed: 0, revoked: 1, expired: 0, createdAt: 10, expiresAt: 100 },
        { batch: 'B', quota: BIG, total: 1, unused: 0, redeemed: 0, revoked: 0, expired: 1, createdAt: 9, expiresAt: 100 },
        { batch: 'A', quota: 1_000, total: 3, unused: 1, redeemed: 1, revoked: 0, expired: 1, createdAt: 5, expiresAt: 300 },
      ]);
      expect((await redemptionCodes.batches(150, 1, 1)).items.map((b) => b.batch)).toEqual(['B']);
    });
  });
}
