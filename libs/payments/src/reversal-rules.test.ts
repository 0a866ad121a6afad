import { describe, expect, test } from 'bun:test';
import type { TopupOrderRow, TopupReversalRow } from '@gw/db';
import { chargeHeld, clawbackShare, decideReversal, inOrderUnits, paymentBase } from './reversal-rules';

const order = (over: Partial<TopupOrderRow> = {}): TopupOrderRow => ({
  id: 1, tradeNo: 'tp_1', userId: 7, provider: 'providerA', amount: 1000, currency: 'usd', credit: 10_000, status: 'paid',
  providerRef: 'cs_1', checkoutUrl: '', paymentRef: 'pi_1', clawedBack: 0, paidAmount: 0, paidCurrency: '', createdAt: 1, updatedAt: 1, paidAt: 1, ...over,
});
const row = (key: string, state: string, amount: number, over: Partial<TopupReversalRow> = {}): TopupReversalRow =>
  ({ id: 1, tradeNo: 'tp_1', key, state, amount, gross: amount, asOf: 0, since: 0, eventId: 'e', updatedAt: 1, ...over });
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

  test('a failed refund gives back what the charge total it was in took, once, in either order', () => {
    const failed = { key: 'refund:ch_1', action: 'refund_failed' as const, amount: 200, cumulative: false, currency: 'usd', refundId: 're_2', since: 100, asOf: 200 };
    const total = (amount: number, asOf: number) => ({ ...refund(amount), asOf });
    // Counted first (300 at t=150, including re_2), then the failure: 200 of 300 comes back.
    const counted = row('refund:ch_1', 'refunded', 300, { asOf: 150 });
    const d = decideReversal('providerA', 't', L, failed, order({ clawedBack: 3000 }), [counted], true);
    expect(d).toMatchObject({
      outcome: 'refund_failed', clawedBack: 1000,
      reversal: { key: 'refund:ch_1:failed:re_2', state: 'failed', amount: 0, gross: 200, asOf: 200, since: 100 },
      related: [{ key: 'refund:ch_1', amount: 100, gross: 300, asOf: 150 }],
    });
    const fRow = row('refund:ch_1:failed:re_2', 'failed', 0, { gross: 200, asOf: 200, since: 100 });
    expect(decideReversal('providerA', 't', L, failed, order({ clawedBack: 1000 }), [row('refund:ch_1', 'refunded', 100, { gross: 300, asOf: 150 }), fRow], true).outcome)
      .toBe('noop:refund already failed');
    // The failure first: nothing to give back; the older total that included it then takes only the rest.
    expect(decideReversal('providerA', 't', L, failed, order(), [], true)).toMatchObject({ outcome: 'refund_failed', clawedBack: 0, related: [] });
    expect(decideReversal('providerA', 't', L, total(300, 150), order(), [fRow], true)).toMatchObject({ outcome: 'refunded', clawedBack: 1000, reversal: { amount: 100, gross: 300 } });
    // A total stated after the failure is already net of it; a stale larger one after it changes nothing.
    const later = row('refund:ch_1', 'refunded', 100, { gross: 100, asOf: 250 });
    expect(decideReversal('providerA', 't', L, total(300, 150), order({ clawedBack: 1000 }), [later, fRow], true).outcome).toBe('noop:refund total 300 is older than the counted 100');
  });
  test('a charge counted before its time was kept gives nothing back for a failure until Stripe states a new total', () => {
    const failed = { key: 'refund:ch_1', action: 'refund_failed' as const, amount: 200, cumulative: false, currency: 'usd', refundId: 're_2', since: 100, asOf: 200 };
    const legacy = row('refund:ch_1', 'refunded', 300);
    expect(decideReversal('providerA', 't', L, failed, order({ clawedBack: 3000 }), [legacy], true)).toMatchObject({ outcome: 'refund_failed', clawedBack: 3000 });
    const fRow = row('refund:ch_1:failed:re_2', 'failed', 0, { gross: 200, asOf: 200, since: 100 });
    expect(decideReversal('providerA', 't', L, { ...refund(150), asOf: 1000 }, order({ clawedBack: 3000 }), [legacy, fRow], true))
      .toMatchObject({ outcome: 'refunded', clawedBack: 1500 });
    // Counted at updated_at 1 (our clock): a smaller total stated before then, give or take the clocks' skew, may be
    // an older event delivered late, and the larger stays; a larger one is counted whenever it was stated.
    expect(decideReversal('providerA', 't', L, { ...refund(200), asOf: 301 }, order({ clawedBack: 3000 }), [legacy], true).outcome)
      .toBe('noop:refund already counted (300)');
    expect(decideReversal('providerA', 't', L, { ...refund(400), asOf: 50 }, order({ clawedBack: 3000 }), [legacy], true))
      .toMatchObject({ outcome: 'refunded', clawedBack: 4000 });
  });
  test('a failure stated again by an earlier event moves its time back; a later or equal one changes nothing', () => {
    const failed = (asOf: number) => ({ key: 'refund:ch_1', action: 'refund_failed' as const, amount: 200, cumulative: false, currency: 'usd', refundId: 're_1', since: 5, asOf });
    // 150 stated at t=30 is net of re_1; dated by a later update (t=40) the failure was taken out of it.
    const charge = row('refund:ch_1', 'refunded', 0, { gross: 150, asOf: 30 });
    const late = row('refund:ch_1:failed:re_1', 'failed', 0, { gross: 200, asOf: 40, since: 5 });
    expect(decideReversal('providerA', 't', L, failed(20), order(), [charge, late], true)).toMatchObject({
      outcome: 'refund_failed', clawedBack: 1500,
      reversal: { key: 'refund:ch_1:failed:re_1', asOf: 20 }, related: [{ key: 'refund:ch_1', amount: 150 }],
    });
    expect(decideReversal('providerA', 't', L, failed(40), order(), [charge, late], true).outcome).toBe('noop:refund already failed');
    expect(decideReversal('providerA', 't', L, failed(50), order(), [charge, late], true).outcome).toBe('noop:refund already failed');
  });
  test('chargeHeld: only failures created by the total and failed after it are taken out; same-second failures count as in it', () => {
    const f = { gross: 50, since: 10, asOf: 20 };
    expect(chargeHeld({ gross: 80, asOf: 10 }, [f])).toBe(30);
    expect(chargeHeld({ gross: 80, asOf: 9 }, [f])).toBe(80);
    expect(chargeHeld({ gross: 80, asOf: 20 }, [f])).toBe(80);
    expect(chargeHeld({ gross: 30, asOf: 15 }, [f, { gross: 50, since: 11, asOf: 30 }])).toBe(0);
    expect(chargeHeld(undefined, [f])).toBe(0);
  });
});

describe('what the customer paid', () => {
  test('a tax on top (same currency) is the base; a presentment currency converts to the order\'s units, rounded down; another currency is null', () => {
    const taxed = order({ amount: 500, paidAmount: 550, paidCurrency: 'usd' });
    expect(paymentBase(taxed)).toBe(550);
    expect(inOrderUnits(taxed, 275, 'USD')).toBe(275);
    expect(clawbackShare(taxed.credit, paymentBase(taxed), 275)).toBe(5000);
    const eur = order({ amount: 500, paidAmount: 460, paidCurrency: 'eur' });
    expect(paymentBase(eur)).toBe(500);
    expect(inOrderUnits(eur, 460, 'EUR')).toBe(500);
    expect(inOrderUnits(eur, 1, 'eur')).toBe(1);
    expect(inOrderUnits(eur, 100, 'eur')).toBe(108);
    expect(inOrderUnits(eur, 250, 'usd')).toBe(250);
    expect(inOrderUnits(eur, 250, 'gbp')).toBeNull();
    expect(inOrderUnits(order(), 250, 'eur')).toBeNull();
    expect(inOrderUnits(order(), 250, null)).toBe(250);
  });

  test('a refund in the presentment currency takes its share; in another currency it is a mismatch', () => {
    const eur = order({ amount: 500, credit: 5000, paidAmount: 460, paidCurrency: 'eur' });
    const d = decideReversal('providerA', 'charge.refunded', L, { ...refund(230), currency: 'eur', asOf: 5 }, eur, [], true);
    expect(d).toMatchObject({ outcome: 'refunded', clawedBack: 2500, reversal: { amount: 250, gross: 250 } });
    expect(decideReversal('providerA', 'charge.refunded', L, { ...refund(230), currency: 'gbp', asOf: 5 }, eur, [], true)).toEqual({ outcome: 'mismatch:currency gbp != usd' });
  });
});
