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

describe('ProviderB', () => {
  test('amount must be whole units of the product', () => {
    expect(() => b.checkAmount(300)).not.toThrow();
    expect(() => b.checkAmount(250)).toThrow('multiple');
  });
  test('checkout.completed carries request_id, order amount/currency and product', () => {
    const ev = { id: 'evt', eventType: 'checkout.completed', object: { id: 'ch_1', request_id: 'tp_9', order: { amount: 1900, currency: 'USD', status: 'paid', product: 'prod_1' }, product: { id: 'prod_1' } } };
    expect(b.parseEvent(enc(ev))).toEqual({ kind: 'paid', eventId: 'evt', type: 'checkout.completed', tradeNo: 'tp_9', providerRef: 'ch_1', amount: 1900, currency: 'USD', productId: 'prod_1' });
    expect(b.parseEvent(enc({ ...ev, eventType: 'refund.created' })).kind).toBe('ignored');
    expect(b.parseEvent(enc({ ...ev, object: { ...ev.object, request_id: undefined } })).kind).toBe('noop');
  });
});
