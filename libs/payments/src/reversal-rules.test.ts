import { describe, expect, test } from 'bun:test';
import type { TopupOrderRow, TopupReversalRow } from '@gw/db';
import { clawbackShare, decideReversal } from './reversal-rules';

const order = (over: Partial<TopupOrderRow> = {}): TopupOrderRow => ({
  id: 1, tradeNo: 'tp_1', userId: 7, provider: 'providerA', amount: 1000, currency: 'usd', credit: 10_000, status: 'paid',
  providerRef: 'cs_1', checkoutUrl: '', paymentRef: 'pi_1', clawedBack: 0, createdAt: 1, updatedAt: 1, paidAt: 1, ...over,
});
const row = (key: string, state: string, amount: number): TopupReversalRow => ({ id: 1, tradeNo: 'tp_1', key, state, amount, eventId: 'e', updatedAt: 1 });
const L = { paymentRef: 'pi_1' };
const refund = (amount: number, cumulative = true) => ({ key: 'refund:ch_1', action: 'refund' as const, amount, cumulative, currency: 'usd' });

describe('clawbackShare', () => {
  test('proportional, rounded down, capped at the credit; a full refund takes exactly the credit', () => {
    expect(clawbackShare(10_000, 1000, 1000)).toBe(10_000);
    expect(clawbackShare(10_000, 1000, 5000)).toBe(10_000);
    expect(clawbackShare(100, 3, 1)).toBe(33);
    expect(clawbackShare(100, 3, 2)).toBe(66);
    expect(clawbackShare(0, 3, 2)).toBe(0);
    // credit × amount beyond 2^53 stays exact.
    expect(clawbackShare(9_000_000_000_000, 1_000_000, 999_999)).toBe(8_999_991_000_000);
  });
});

describe('decideReversal', () => {
  test('running refund totals converge on the largest, whatever the order', () => {
    const d1 = decideReversal('providerA', 't', L, refund(300), order(), [], true);
    expect(d1).toMatchObject({ outcome: 'refunded', reversal: { key: 'refund:ch_1', state: 'refunded', amount: 300 }, clawedBack: 3000 });
    const d2 = decideReversal('providerA', 't', L, refund(500), order({ clawedBack: 3000 }), [row('refund:ch_1', 'refunded', 300)], true);
    expect(d2).toMatchObject({ outcome: 'refunded', clawedBack: 5000 });
    expect(decideReversal('providerA', 't', L, refund(300), order({ clawedBack: 5000 }), [row('refund:ch_1', 'refunded', 500)], true).outcome)
      .toBe('noop:refund already counted (500)');
  });
  test('a dispute and a refund together never take more than the credit; a won dispute gives its share back', () => {
    const rows = [row('refund:ch_1', 'refunded', 400)];
    expect(decideReversal('providerA', 't', L, { key: 'dispute:dp', action: 'withdrawn', amount: 1000, cumulative: false, currency: 'usd' }, order({ clawedBack: 4000 }), rows, true))
      .toMatchObject({ outcome: 'dispute_withdrawn', clawedBack: 10_000 });
    expect(decideReversal('providerA', 't', L, { key: 'dispute:dp', action: 'reinstated', amount: 1000, cumulative: false, currency: 'usd' }, order({ clawedBack: 10_000 }), [...rows, row('dispute:dp', 'withdrawn', 1000)], true))
      .toMatchObject({ outcome: 'dispute_reinstated', reversal: { state: 'reinstated', amount: 0 }, clawedBack: 4000 });
  });
  test('unknown, foreign, other-currency and unpaid orders', () => {
    expect(decideReversal('providerA', 't', L, refund(1), undefined, [], false).outcome).toBe('unknown_order');
    expect(decideReversal('providerB', 't', L, refund(1), order(), [], true).outcome).toBe('unknown_order');
    expect(decideReversal('providerA', 't', L, { ...refund(1), currency: 'EUR' }, order(), [], true).outcome).toBe('mismatch:currency eur != usd');
    expect(decideReversal('providerA', 't', L, refund(1), order({ status: 'pending' }), [], true)).toMatchObject({ outcome: 'not_paid:pending', clawedBack: 0 });
    expect(decideReversal('providerA', 't', L, refund(1), order(), [], false).outcome).toBe('user_not_found');
  });
  test("found by its trade no, an order whose payment or checkout id differs from the event's is a mismatch, never a debit", () => {
    expect(decideReversal('providerA', 't', { tradeNo: 'tp_1', paymentRef: 'pi_other' }, refund(1), order(), [], true).outcome).toBe('mismatch:payment');
    expect(decideReversal('providerA', 't', { tradeNo: 'tp_1', checkoutRef: 'cs_other' }, refund(1), order(), [], true).outcome).toBe('mismatch:checkout');
    // An order credited before payment_ref existed has none to compare.
    expect(decideReversal('providerA', 't', { tradeNo: 'tp_1', paymentRef: 'pi_9' }, refund(1), order({ paymentRef: '' }), [], true).outcome).toBe('refunded');
  });
});
