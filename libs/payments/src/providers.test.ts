import { describe, expect, test } from 'bun:test';
import { ProviderA, stripeForm } from './provider-a';
import { ProviderB } from './provider-b';

const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const a = new ProviderA({ apiBase: 'http://x', secretKey: 'sk', webhookSecret: 'w', toleranceSeconds: 300 }, 1000);
const b = new ProviderB({ apiBase: 'http://x', apiKey: 'k', webhookSecret: 'w', productId: 'prod_1', unitAmount: 100 }, 1000);

test('stripeForm uses bracket keys for nested objects and arrays', () => {
  const f = stripeForm({ mode: 'payment', line_items: [{ quantity: 1, price_data: { unit_amount: 500 } }], metadata: { a: 'x y' }, skip: undefined });
  expect(f.toString()).toBe('mode=payment&line_items%5B0%5D%5Bquantity%5D=1&line_items%5B0%5D%5Bprice_data%5D%5Bunit_amount%5D=500&metadata%5Ba%5D=x+y');
});

describe('ProviderA.parseEvent', () => {
  const session = { id: 'cs_1', client_reference_id: 'tp_1', payment_status: 'paid', amount_total: 500, currency: 'usd' };
  test('maps the four checkout kinds; others are ignored', () => {
    expect(a.parseEvent(enc({ id: 'e1', type: 'checkout.session.completed', data: { object: session } })))
      .toEqual({ kind: 'paid', eventId: 'e1', type: 'checkout.session.completed', tradeNo: 'tp_1', providerRef: 'cs_1', amount: 500, currency: 'usd' });
    expect(a.parseEvent(enc({ id: 'e2', type: 'checkout.session.completed', data: { object: { ...session, payment_status: 'unpaid' } } })).kind).toBe('noop');
    expect(a.parseEvent(enc({ id: 'e3', type: 'checkout.session.async_payment_succeeded', data: { object: session } })).kind).toBe('paid');
    expect(a.parseEvent(enc({ id: 'e4', type: 'checkout.session.async_payment_failed', data: { object: session } })).kind).toBe('failed');
    expect(a.parseEvent(enc({ id: 'e5', type: 'checkout.session.expired', data: { object: session } })).kind).toBe('expired');
    expect(a.parseEvent(enc({ id: 'e6', type: 'invoice.paid', data: {} })).kind).toBe('ignored');
  });
  test('a paid event without an integer amount is a 400', () => {
    expect(() => a.parseEvent(enc({ id: 'e', type: 'checkout.session.completed', data: { object: { ...session, amount_total: '500' } } }))).toThrow('amount_total');
    expect(() => a.parseEvent(enc({ type: 'checkout.session.completed' }))).toThrow('id');
    expect(() => a.parseEvent(enc([1]))).toThrow('JSON object');
  });
});

describe('ProviderA refunds and disputes', () => {
  const charge = { id: 'ch_1', object: 'charge', payment_intent: 'pi_1', amount: 500, amount_refunded: 200, currency: 'usd', metadata: {}, refunds: { data: [] } };
  const dispute = { id: 'dp_1', object: 'dispute', charge: 'ch_1', payment_intent: 'pi_1', amount: 500, currency: 'usd', status: 'needs_response' };
  test('charge.refunded: the running total, keyed by the charge, found by the PaymentIntent (or metadata.trade_no)', () => {
    expect(a.parseEvent(enc({ id: 'e1', type: 'charge.refunded', created: 1700000000, data: { object: charge } }))).toEqual({
      kind: 'reversal', eventId: 'e1', type: 'charge.refunded', lookup: { paymentRef: 'pi_1', tradeNo: null },
      change: { key: 'refund:ch_1', action: 'refund', amount: 200, cumulative: true, currency: 'usd', asOf: 1700000000 },
    });
    // The running total is ordered by when Stripe stated it: an event without its time is malformed.
    expect(() => a.parseEvent(enc({ id: 'e0', type: 'charge.refunded', data: { object: charge } }))).toThrow('created');
    const bare = a.parseEvent(enc({ id: 'e2', type: 'charge.refunded', created: 1, data: { object: { ...charge, payment_intent: null, metadata: { trade_no: 'tp_1' } } } }));
    expect(bare.kind === 'reversal' && bare.lookup).toEqual({ paymentRef: null, tradeNo: 'tp_1' });
    expect(a.parseEvent(enc({ id: 'e3', type: 'charge.refunded', data: { object: { ...charge, payment_intent: null } } })).kind).toBe('noop');
    expect(() => a.parseEvent(enc({ id: 'e4', type: 'charge.refunded', created: 1, data: { object: { ...charge, amount_refunded: '1' } } }))).toThrow('amount_refunded');
    // A negative amount would give quota back: refused like any malformed body.
    expect(() => a.parseEvent(enc({ id: 'e5', type: 'charge.refunded', created: 1, data: { object: { ...charge, amount_refunded: -500 } } }))).toThrow('negative');
  });
  test('a failed or canceled refund (charge.refund.updated, refund.updated, refund.failed) names its charge, amount and times', () => {
    const refund = { id: 're_1', object: 'refund', amount: 150, charge: 'ch_1', payment_intent: 'pi_1', currency: 'usd', status: 'failed', failure_reason: 'expired_or_canceled_card', created: 1700000000, metadata: { trade_no: 'not ours to read' } };
    for (const type of ['charge.refund.updated', 'refund.updated', 'refund.failed']) {
      expect(a.parseEvent(enc({ id: 'e1', type, created: 1700000500, data: { object: refund } }))).toEqual({
        kind: 'reversal', eventId: 'e1', type, lookup: { paymentRef: 'pi_1', tradeNo: null }, awaitOrder: true,
        change: { key: 'refund:ch_1', action: 'refund_failed', amount: 150, cumulative: false, currency: 'usd', asOf: 1700000500, refundId: 're_1', since: 1700000000 },
      });
    }
    expect(a.parseEvent(enc({ id: 'e2', type: 'charge.refund.updated', created: 2, data: { object: { ...refund, status: 'canceled' } } }))).toMatchObject({ change: { action: 'refund_failed' } });
    expect(a.parseEvent(enc({ id: 'e3', type: 'charge.refund.updated', created: 2, data: { object: { ...refund, status: 'succeeded' } } }))).toMatchObject({ kind: 'noop', reason: 'refund succeeded' });
    expect(() => a.parseEvent(enc({ id: 'e4', type: 'charge.refund.updated', created: 2, data: { object: { ...refund, charge: null } } }))).toThrow('data.object.charge');
    expect(() => a.parseEvent(enc({ id: 'e5', type: 'charge.refund.updated', created: 2, data: { object: { ...refund, created: undefined } } }))).toThrow('data.object.created');
  });
  test('disputes: funds_withdrawn and funds_reinstated move money; created and closed are recorded only', () => {
    const w = a.parseEvent(enc({ id: 'e1', type: 'charge.dispute.funds_withdrawn', created: 1, data: { object: dispute } }));
    expect(w).toMatchObject({ kind: 'reversal', awaitOrder: true, change: { key: 'dispute:dp_1', action: 'withdrawn', amount: 500 } });
    const r = a.parseEvent(enc({ id: 'e2', type: 'charge.dispute.funds_reinstated', created: 1, data: { object: { ...dispute, status: 'won' } } }));
    expect(r).toMatchObject({ kind: 'reversal', awaitOrder: true, change: { key: 'dispute:dp_1', action: 'reinstated' } });
    expect(a.parseEvent(enc({ id: 'e3', type: 'charge.dispute.created', data: { object: dispute } })).kind).toBe('noop');
    expect(a.parseEvent(enc({ id: 'e4', type: 'charge.dispute.closed', data: { object: { ...dispute, status: 'lost' } } }))).toMatchObject({ kind: 'noop', reason: 'dispute lost' });
    expect(a.parseEvent(enc({ id: 'e5', type: 'charge.succeeded', data: { object: {} } })).kind).toBe('ignored');
  });
});

describe('ProviderB refunds and disputes', () => {
  test('refund.created: one refund by its id; the checkout (request_id), order or checkout id find the order', () => {
    const refund = { id: 'ref_1', object: 'refund', status: 'succeeded', refund_amount: 300, refund_currency: 'USD', checkout: { id: 'ch_1', request_id: 'tp_9' }, order: { id: 'ord_1' }, transaction: { id: 'tran_1' } };
    expect(b.parseEvent(enc({ id: 'e1', eventType: 'refund.created', object: refund }))).toEqual({
      kind: 'reversal', eventId: 'e1', type: 'refund.created', lookup: { tradeNo: 'tp_9', paymentRef: 'ord_1', checkoutRef: 'ch_1' },
      change: { key: 'refund:ref_1', action: 'refund', amount: 300, cumulative: false, currency: 'USD' },
    });
    const ids = b.parseEvent(enc({ id: 'e2', eventType: 'refund.created', object: { ...refund, checkout: 'ch_1', order: 'ord_1' } }));
    expect(ids.kind === 'reversal' && ids.lookup).toEqual({ tradeNo: null, paymentRef: 'ord_1', checkoutRef: 'ch_1' });
    expect(b.parseEvent(enc({ id: 'e3', eventType: 'refund.created', object: { ...refund, status: 'failed' } })).kind).toBe('noop');
  });
  test('dispute.created withdraws the disputed amount', () => {
    const d = { id: 'disp_1', object: 'dispute', amount: 1000, currency: 'USD', checkout: 'ch_1', order: 'ord_1' };
    expect(b.parseEvent(enc({ id: 'e1', eventType: 'dispute.created', object: d }))).toMatchObject({ kind: 'reversal', change: { key: 'dispute:disp_1', action: 'withdrawn', amount: 1000 } });
  });
});

describe('ProviderB', () => {
  test('amount must be whole units of the product', () => {
    expect(() => b.checkAmount(300)).not.toThrow();
    expect(() => b.checkAmount(250)).toThrow('multiple');
  });
  test('checkout.completed carries request_id, order amount/currency and product', () => {
    const ev = { id: 'evt', eventType: 'checkout.completed', object: { id: 'ch_1', request_id: 'tp_9', order: { amount: 1900, currency: 'USD', status: 'paid', product: 'prod_1' }, product: { id: 'prod_1' } } };
    expect(b.parseEvent(enc(ev))).toEqual({ kind: 'paid', eventId: 'evt', type: 'checkout.completed', tradeNo: 'tp_9', providerRef: 'ch_1', amount: 1900, currency: 'USD', productId: 'prod_1' });
    expect(b.parseEvent(enc({ ...ev, eventType: 'subscription.paid' })).kind).toBe('ignored');
    expect(b.parseEvent(enc({ ...ev, object: { ...ev.object, request_id: undefined } })).kind).toBe('noop');
  });
});
