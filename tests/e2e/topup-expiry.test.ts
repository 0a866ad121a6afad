/**
 * Orders nobody else closes. An order with a checkout that is not paid within TOPUP_PENDING_EXPIRY_SECONDS (here 3 s)
 * is marked expired by the leader's sweep: providerB (Creem) sends no expiry event, so its unpaid orders used to stay
 * pending for ever. The customer may still pay that checkout afterwards (the link outlives our patience, a Stripe
 * async payment settles days later): the payment is credited, once, however many events and nodes deliver it. An
 * order of a provider that was removed from the configuration (no event of it can arrive) is expired at once, and
 * credits nothing. Rows of the removed provider are written through the gateway's own store.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser } from '../helpers/gateway';
import { settledStatus as settledOf, startPayments, type PaymentsHarness } from './payment-webhooks-setup';

let h: PaymentsHarness;
beforeAll(async () => {
  h = await startPayments({ PAYMENT_API_TIMEOUT_MS: '1000', TOPUP_CHECKOUT_DEADLINE_SECONDS: '2', TOPUP_PENDING_EXPIRY_SECONDS: '3' });
});
afterAll(async () => { await h.stop(); });

// Each test waits out the 3 s expiry and a sweep (up to 1 s) before it acts: more than bun's default 5 s per test.
const rand = () => crypto.randomUUID().replace(/-/g, '').slice(0, 20);

const settledStatus = (tradeNo: string, token: string) => settledOf(h, tradeNo, token);

describe('an order with a checkout that is never paid', () => {
  test('providerB: it is marked expired after TOPUP_PENDING_EXPIRY_SECONDS', async () => {
    const { user, tradeNo } = await h.orderB(500);
    expect((await h.orderView(tradeNo, user.token)).status).toBe('pending');
    expect(await settledStatus(tradeNo, user.token)).toBe('expired');
    expect(h.gw.logs.some((l) => l.includes('topup.pending_expired') && l.includes(tradeNo))).toBe(true);
    expect(await h.balance(user.token)).toBe(0);
  }, 20_000);

  test('providerB: a payment arriving after the expiry is credited once, whatever the resends', async () => {
    const { user, tradeNo, checkout } = await h.orderB(500);
    expect(await settledStatus(tradeNo, user.token)).toBe('expired');
    // Creem delivers the payment under several event ids at once (its retries, two deliveries racing).
    const events = Array.from({ length: 4 }, () => h.creem.completedEvent(checkout, {}, `evt_${rand()}`));
    const outcomes = (await Promise.all(events.map((e) => h.postB(e)))).map((r) => r.outcome).sort();
    expect(outcomes).toEqual(['credited', 'not_pending:paid', 'not_pending:paid', 'not_pending:paid']);
    expect(await h.postB(events[0]!)).toEqual({ outcome: 'duplicate', trade_no: tradeNo });
    expect(await h.balance(user.token)).toBe(5000);
    expect((await h.orderView(tradeNo, user.token)).status).toBe('paid');
    // Not swept back: a paid order is final.
    await Bun.sleep(1500);
    expect((await h.orderView(tradeNo, user.token)).status).toBe('paid');
    await h.balanced(user.id, tradeNo);
  }, 20_000);

  test('providerB: a refund recorded while expired is taken back when the late payment credits', async () => {
    const { user, tradeNo, checkout } = await h.orderB(400);
    expect(await settledStatus(tradeNo, user.token)).toBe('expired');
    expect((await h.postB(h.creem.refundEvent(checkout, 100, `ref_${rand()}`))).outcome).toBe('not_paid:expired');
    expect((await h.postB(h.creem.completedEvent(checkout))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(3000);
    await h.balanced(user.id, tradeNo);
  }, 20_000);

  test('providerA: a payment of another checkout naming the expired order still credits nothing', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    expect(await settledStatus(tradeNo, user.token)).toBe('expired');
    const other = { ...session, id: `cs_test_other${rand()}` };
    expect(await h.postA(h.stripe.event('checkout.session.completed', other, { status: 'complete', payment_status: 'paid' })))
      .toEqual({ outcome: 'mismatch:checkout', trade_no: tradeNo });
    // Its own checkout, paid late (an async payment settling), credits.
    expect((await h.postA(h.stripe.event('checkout.session.async_payment_succeeded', session, { status: 'complete', payment_status: 'paid' }))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(5000);
    await h.balanced(user.id, tradeNo);
  }, 20_000);
});

describe('an order of a provider no longer configured', () => {
  test('it is marked expired, credits nothing, and the operator is told why', async () => {
    const user = await makeUser(h.gw);
    const at = Math.floor(Date.now() / 1000);
    const gone = await h.gw.services.stores.topupOrders.insert({
      tradeNo: `tp_gone${rand()}`, userId: user.id, provider: 'epay', amount: 500, currency: 'usd', credit: 5000, status: 'pending',
      providerRef: `ep_${rand()}`, checkoutUrl: 'https://pay.example/x', createdAt: at, updatedAt: at,
    });
    expect(await settledStatus(gone.tradeNo, user.token)).toBe('expired');
    expect(h.gw.logs.some((l) => l.includes('topup.provider_removed_expired') && l.includes('epay') && l.includes(gone.tradeNo))).toBe(true);
    expect(await h.balance(user.token)).toBe(0);
    await h.balanced(user.id);
  }, 20_000);
});
