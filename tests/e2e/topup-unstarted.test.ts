/**
 * Orders whose create call never finished: the pending row is written before the provider is asked for a checkout,
 * so a process that dies during that call (or whose last write fails) leaves an order with no checkout id. Such an
 * order is marked failed once TOPUP_CHECKOUT_DEADLINE_SECONDS have passed (here 2 s; the provider timeout is 1 s), by
 * a sweep on the leader, and its owner reads the final status. Orders that have a checkout are left to the provider's
 * events. A payment naming a swept order (the provider made a checkout whose answer was never stored) credits nothing
 * and is reported to the operator. The dead node's row is written through the gateway's own store, backdated.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser } from '../helpers/gateway';
import { settledStatus as settledOf, startPayments, type PaymentsHarness } from './payment-webhooks-setup';

let h: PaymentsHarness;
beforeAll(async () => { h = await startPayments({ PAYMENT_API_TIMEOUT_MS: '1000', TOPUP_CHECKOUT_DEADLINE_SECONDS: '2' }); });
afterAll(async () => { await h.stop(); });

const nowS = () => Math.floor(Date.now() / 1000);
const rand = () => crypto.randomUUID().replace(/-/g, '').slice(0, 20);

/** A pending order as a create whose process died leaves it: no checkout id, created `age` seconds ago. */
async function leftover(userId: number, provider: 'providerA' | 'providerB', age: number, providerRef = '') {
  const at = nowS() - age;
  return h.gw.services.stores.topupOrders.insert({
    tradeNo: `tp_dead${rand()}`, userId, provider, amount: 500, currency: 'usd', credit: 5000, status: 'pending',
    providerRef, checkoutUrl: providerRef ? `https://pay.example/${providerRef}` : '', createdAt: at, updatedAt: at,
  });
}

const settledStatus = (tradeNo: string, token: string) => settledOf(h, tradeNo, token);

describe('an order whose create never finished', () => {
  for (const provider of ['providerA', 'providerB'] as const) {
    test(`${provider}: it is marked failed after the deadline; an order with a checkout id stays pending`, async () => {
      const user = await makeUser(h.gw);
      const dead = await leftover(user.id, provider, 30);
      const started = await leftover(user.id, provider, 30, `ref_${rand()}`);
      expect(await settledStatus(dead.tradeNo, user.token)).toBe('failed');
      expect((await h.orderView(started.tradeNo, user.token)).status).toBe('pending');
      const list = (await h.gw.api('GET', '/api/topup/self', undefined, user.token)).body.data.items;
      expect(Object.fromEntries(list.map((o: any) => [o.trade_no, o.status]))).toEqual({ [dead.tradeNo]: 'failed', [started.tradeNo]: 'pending' });
      expect(await h.balance(user.token)).toBe(0);
    });
  }

  test('a payment of a checkout the swept order never stored credits nothing, once, and is reported', async () => {
    const user = await makeUser(h.gw);
    const dead = await leftover(user.id, 'providerA', 30);
    expect(await settledStatus(dead.tradeNo, user.token)).toBe('failed');
    // The checkout the provider made for it, whose answer the dead process never stored.
    const made = h.stripe.sessionFor((await h.orderA(500)).tradeNo);
    const lost = { ...made, id: `cs_test_lost${rand()}`, client_reference_id: dead.tradeNo };
    const paid = h.stripe.event('checkout.session.completed', lost, { status: 'complete', payment_status: 'paid' });
    expect(await h.postA(paid)).toEqual({ outcome: 'mismatch:checkout', trade_no: dead.tradeNo });
    expect(await h.postA(paid)).toEqual({ outcome: 'duplicate', trade_no: dead.tradeNo });
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.orderView(dead.tradeNo, user.token)).status).toBe('failed');
    expect(h.gw.logs.some((l) => l.includes('topup.paid_not_credited') && l.includes(dead.tradeNo))).toBe(true);
    await h.balanced(user.id);
  });

  test('a create held past the provider timeout is failed by its own call, well before the deadline sweep', async () => {
    const user = await makeUser(h.gw);
    let release!: () => void;
    h.stripe.holdCreates = new Promise<void>((r) => { release = r; });
    try {
      const r = await h.gw.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, user.token);
      expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 502, code: 'provider_error' });
    } finally {
      h.stripe.holdCreates = null;
      release();
    }
    const [order] = (await h.gw.api('GET', '/api/topup/self', undefined, user.token)).body.data.items;
    expect(order.status).toBe('failed');
  });
});
