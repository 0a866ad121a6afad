/**
 * Payment events aimed at the wrong order or the wrong moment, each correctly signed unless said otherwise: a
 * providerA payment naming a providerB order's trade no, events that would close a paid order again, a Stripe
 * timestamp spelled differently from how it was signed, and many partial Creem refunds and a dispute that add up to
 * far more than was paid. After each, the balance is Σ ledger and no order has given back more than it credited.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import { makeUser } from '../helpers/gateway';
import { A_SECRET, startPayments, type PaymentsHarness } from './payment-webhooks-setup';

let h: PaymentsHarness;
beforeAll(async () => { h = await startPayments(); });
afterAll(async () => { await h.stop(); });

const paidSession = { status: 'complete' as const, payment_status: 'paid' as const };
const nowS = () => Math.floor(Date.now() / 1000);
const orderRow = (tradeNo: string) => h.gw.db.get('select status, provider_ref, payment_ref from topup_orders where trade_no = ?', tradeNo) as Promise<any>;

async function postRawA(body: string, header: string) {
  const res = await fetch(`${h.gw.url}/api/providerA/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': header }, body });
  return { status: res.status, json: await res.json() as any };
}

describe('an event for an order that is not its own', () => {
  test('a providerA payment naming a providerB order is unknown_order; the order still credits once through providerB', async () => {
    const b = await h.orderB(500);
    // A Stripe session (a payment link on the same account, say) whose client_reference_id is the Creem order's trade no.
    const a = await h.orderA(500);
    const foreign = h.stripe.event('checkout.session.completed', { ...a.session, client_reference_id: b.tradeNo }, paidSession);
    expect(await h.postA(foreign)).toEqual({ outcome: 'unknown_order', trade_no: b.tradeNo });
    expect((await orderRow(b.tradeNo)).status).toBe('pending');
    expect(await h.balance(b.user.token)).toBe(0);
    expect((await h.postB(h.creem.completedEvent(b.checkout))).outcome).toBe('credited');
    expect(await h.balance(b.user.token)).toBe(5000);
    await h.balanced(b.user.id, b.tradeNo);
    // The providerA order it came through was not touched either.
    expect((await orderRow(a.tradeNo)).status).toBe('pending');
    await h.balanced(a.user.id);
  });

  /**
   * Starts a top-up of 700 whose provider call is held, runs `during` with its trade no (the pending order is listed
   * while the call is in flight, so its owner knows it), then lets the call finish; the order's own checkout afterwards.
   */
  async function whileCreating(provider: 'providerA' | 'providerB', during: (tradeNo: string) => Promise<void>) {
    const user = await makeUser(h.gw);
    const double = provider === 'providerA' ? h.stripe : h.creem;
    let release!: () => void;
    double.holdCreates = new Promise<void>((r) => { release = r; });
    const created = h.gw.api('POST', '/api/topup/', { amount: 700, provider }, user.token);
    let tradeNo = '';
    try {
      while (!tradeNo) tradeNo = (await h.gw.api('GET', '/api/topup/self', undefined, user.token)).body.data.items[0]?.trade_no;
      await during(tradeNo);
      expect(await h.balance(user.token)).toBe(0);
    } finally {
      // Released whatever happened above, so a failure here cannot hold the other tests' creates.
      double.holdCreates = null;
      release();
    }
    expect((await created).status).toBe(200);
    return { user, tradeNo };
  }

  test('a payment of another checkout naming an order whose own checkout is still being made is mismatch:checkout, not a credit', async () => {
    // A session that is not the order's (a payment link's, whose client_reference_id the payer sets), of the same amount.
    const link = h.stripe.sessionFor((await h.orderA(700)).tradeNo);
    let foreign = link;
    const { user, tradeNo } = await whileCreating('providerA', async (t) => {
      foreign = { ...link, id: `cs_test_link${t.slice(3)}`, client_reference_id: t };
      expect(await h.postA(h.stripe.event('checkout.session.completed', foreign, paidSession))).toEqual({ outcome: 'mismatch:checkout', trade_no: t });
    });
    const own = h.stripe.sessionFor(tradeNo);
    expect(own.id).not.toBe(foreign.id);
    // The order's own checkout, paid, credits it once; the foreign one stays refused.
    expect((await h.postA(h.stripe.event('checkout.session.completed', own, paidSession))).outcome).toBe('credited');
    expect((await h.postA(h.stripe.event('checkout.session.completed', foreign, paidSession))).outcome).toBe('mismatch:checkout');
    expect(await h.balance(user.token)).toBe(7000);
    expect((await orderRow(tradeNo)).provider_ref).toBe(own.id);
    await h.balanced(user.id, tradeNo);
  });

  test('an expiry or failure of another checkout naming the order, while its own is being made or after, closes nothing', async () => {
    const link = h.stripe.sessionFor((await h.orderA(700)).tradeNo);
    const foreign = (t: string) => ({ ...link, id: `cs_test_link${t.slice(3)}`, client_reference_id: t });
    const unpaid = { status: 'expired' as const, payment_status: 'unpaid' as const };
    const { user, tradeNo } = await whileCreating('providerA', async (t) => {
      expect(await h.postA(h.stripe.event('checkout.session.expired', foreign(t), unpaid))).toEqual({ outcome: 'mismatch:checkout', trade_no: t });
      expect(await h.postA(h.stripe.event('checkout.session.async_payment_failed', foreign(t), unpaid))).toEqual({ outcome: 'mismatch:checkout', trade_no: t });
      expect((await orderRow(t)).status).toBe('pending');
    });
    // Once the order has its checkout, the foreign session's events are still not its own.
    expect((await h.postA(h.stripe.event('checkout.session.expired', foreign(tradeNo), unpaid))).outcome).toBe('mismatch:checkout');
    expect((await orderRow(tradeNo)).status).toBe('pending');
    expect((await h.postA(h.stripe.event('checkout.session.completed', h.stripe.sessionFor(tradeNo), paidSession))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(7000);
    await h.balanced(user.id, tradeNo);
  });

  test('providerB: the same, for a Creem checkout naming the order\'s request_id', async () => {
    const other = h.creem.checkoutFor((await h.orderB(700)).tradeNo);
    const foreign = (t: string) => ({ ...other, id: `ch_link${t.slice(3)}`, request_id: t });
    const { user, tradeNo } = await whileCreating('providerB', async (t) => {
      expect(await h.postB(h.creem.completedEvent(foreign(t)))).toEqual({ outcome: 'mismatch:checkout', trade_no: t });
    });
    expect((await h.postB(h.creem.completedEvent(h.creem.checkoutFor(tradeNo)))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(7000);
    await h.balanced(user.id, tradeNo);
  });

  test('providerB: a refund of another checkout naming the order while its own is being made is not held against its credit', async () => {
    const other = h.creem.checkoutFor((await h.orderB(700)).tradeNo);
    const foreign = (t: string) => ({ ...other, id: `ch_link${t.slice(3)}`, request_id: t });
    let refund = '';
    const { user, tradeNo } = await whileCreating('providerB', async (t) => {
      refund = h.creem.refundEvent(foreign(t), 700, `ref_link_${t}`);
      expect(await h.postB(refund)).toEqual({ outcome: 'mismatch:checkout', trade_no: t });
    });
    expect(await h.rowsOf(tradeNo)).toEqual([]);
    // The order's own checkout, paid, credits it in full; recorded as not_paid, the foreign refund took all of it back.
    expect((await h.postB(h.creem.completedEvent(h.creem.checkoutFor(tradeNo)))).outcome).toBe('credited');
    expect((await h.postB(refund)).outcome).toBe('duplicate');
    expect(await h.balance(user.token)).toBe(7000);
    await h.balanced(user.id, tradeNo);
  });

  test('another checkout naming a paid order\'s trade no, or a failure or expiry after the credit, changes nothing', async () => {
    const a = await h.orderA(400);
    expect((await h.postA(h.stripe.event('checkout.session.completed', a.session, paidSession))).outcome).toBe('credited');
    const other = { ...a.session, id: `cs_test_other_${a.tradeNo}` };
    expect((await h.postA(h.stripe.event('checkout.session.completed', other, paidSession))).outcome).toBe('mismatch:checkout');
    expect((await h.postA(h.stripe.event('checkout.session.async_payment_succeeded', other, paidSession))).outcome).toBe('mismatch:checkout');
    expect((await h.postA(h.stripe.event('checkout.session.async_payment_failed', a.session, { status: 'complete', payment_status: 'unpaid' }))).outcome).toBe('not_pending:paid');
    expect((await h.postA(h.stripe.event('checkout.session.expired', a.session, { status: 'expired', payment_status: 'unpaid' }))).outcome).toBe('not_pending:paid');
    expect((await h.postA(h.stripe.event('checkout.session.async_payment_succeeded', a.session, paidSession))).outcome).toBe('not_pending:paid');
    expect((await orderRow(a.tradeNo)).status).toBe('paid');
    expect(await h.balance(a.user.token)).toBe(4000);
    expect(await h.gw.db.all("select amount from ledger where kind = 'topup' and ref = ?", a.tradeNo)).toHaveLength(1);
    await h.balanced(a.user.id, a.tradeNo);
  });
});

describe('a Stripe-Signature spelled otherwise than it was signed', () => {
  test('padding and leading zeros name the signed time; a different time with the same v1 is refused', async () => {
    const sign = (t: string, body: string) => createHmac('sha256', A_SECRET).update(`${t}.${body}`).digest('hex');
    const a = await h.orderA(300);
    const body = h.stripe.event('checkout.session.completed', a.session, paidSession);
    const t = nowS();
    const v1 = sign(String(t), body);
    // The same second spelled with leading zeros is the same signed payload (stripe-node reads it as a number too).
    expect((await postRawA(body, `t=000${t},v1=${v1}`)).json.data.outcome).toBe('credited');
    expect((await postRawA(body, ` t = ${t} , v1 = ${v1.toUpperCase()} `)).json.data.outcome).toBe('duplicate');
    // The signature of one second does not cover another, nor a time with a sign, a fraction or an exponent.
    for (const other of [String(t + 1), `+${t}`, `${t}.0`, `${t / 10}e1`, `${t}x`]) {
      const r = await postRawA(body, `t=${other},v1=${v1}`);
      expect([other, r.status, r.json.error?.code]).toEqual([other, 400, 'invalid_signature']);
    }
    expect(await h.balance(a.user.token)).toBe(3000);
    await h.balanced(a.user.id, a.tradeNo);
  });
});

describe('reversals adding up to more than was paid', () => {
  test('providerB: ten partial refunds and a dispute of three times the payment, after the credit was spent, take exactly the credit', async () => {
    const b = await h.orderB(500);
    expect((await h.postB(h.creem.completedEvent(b.checkout))).outcome).toBe('credited');
    // Spent 1,200 of the 5,000 credited: an operator's debit stands in for usage.
    const spent = await h.gw.api('POST', '/api/ledger/adjust', { user_id: b.user.id, amount: -1200, note: 'usage' });
    expect(spent.status).toBe(200);
    const refunds = Array.from({ length: 10 }, (_, i) => h.creem.refundEvent(b.checkout, 150, `ref_part_${b.tradeNo}_${i}`));
    // Each refund delivered twice at once, and the dispute with them.
    const all = await Promise.all([...refunds, ...refunds, h.creem.disputeEvent(b.checkout, 500, `dsp_${b.tradeNo}`)].map((x) => h.postB(x)));
    const outcomes = all.map((r) => r.outcome);
    expect(outcomes.filter((o) => o === 'refunded')).toHaveLength(10);
    expect(outcomes.filter((o) => o === 'duplicate' || o.startsWith('noop:refund already counted'))).toHaveLength(10);
    expect(outcomes).toContain('dispute_withdrawn');
    expect(await h.balance(b.user.token)).toBe(-1200);
    expect((await h.orderView(b.tradeNo, b.user.token)).clawed_back).toBe(5000);
    await h.balanced(b.user.id, b.tradeNo);
  });
});
