/**
 * Refunds and disputes of payments that cost the customer something other than the order's amount: a Creem order
 * with a tax charged on top (its refunds and disputes state money that includes the tax), and a Stripe Checkout with
 * Adaptive Pricing (the customer paid in a presentment currency; refunds and disputes may state that currency). The
 * credit taken back is the share of the payment that it no longer pays for: never more than the credit, never less,
 * and nothing at all for money stated in a currency the payment was not made in.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startPayments, type PaymentsHarness } from './payment-webhooks-setup';

let h: PaymentsHarness;
beforeAll(async () => { h = await startPayments(); });
afterAll(async () => { await h.stop(); });

/** Creem's order of a tax-exclusive price: `amount` is the product total, `amount_paid` adds the tax. */
const taxed = (amount: number, tax: number) => ({ sub_total: amount, discount_amount: 0, tax_amount: tax, amount_due: amount + tax, amount_paid: amount + tax });

describe('providerB (Creem): a tax charged on top', () => {
  test('a partial refund of what was paid takes the same share of the credit, not a larger one', async () => {
    const { user, tradeNo, checkout } = await h.orderB(500);
    expect((await h.postB(h.creem.completedEvent(checkout, taxed(500, 50)))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(5000);
    // Half of the 550 paid comes back to the customer: half of the credit is taken, 2500 (it was 5000 × 275 / 500 = 2750).
    expect((await h.postB(h.creem.refundEvent(checkout, 275, 'ref_tax_1'))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(2500);
    // The merchant refunds the net price only: 500 of 550, so 5000 × 500 / 550 = 4545 in all.
    expect((await h.postB(h.creem.refundEvent(checkout, 225, 'ref_tax_2'))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(5000 - 4545);
    // The rest, with its tax: exactly the credit, and a dispute on top takes nothing more.
    expect((await h.postB(h.creem.refundEvent(checkout, 50, 'ref_tax_3'))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.postB(h.creem.disputeEvent(checkout, 550, 'disp_tax'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.reversalsOf(tradeNo)).map((r: any) => Number(r.amount))).toEqual([-2500, -2045, -455]);
    expect((await h.orderView(tradeNo, user.token)).clawed_back).toBe(5000);
    await h.balanced(user.id, tradeNo);
  });

  test('a dispute of the whole payment with its tax takes exactly the credit; a refund delivered before the payment event uses the same share', async () => {
    const a = await h.orderB(300);
    expect((await h.postB(h.creem.completedEvent(a.checkout, taxed(300, 63)))).outcome).toBe('credited');
    expect((await h.postB(h.creem.disputeEvent(a.checkout, 363, 'disp_tax_full'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(a.user.token)).toBe(0);
    await h.balanced(a.user.id, a.tradeNo);

    // Refunded (121 of the 363 paid: a third) before Creem's checkout.completed is delivered: found by the trade no.
    const b = await h.orderB(300);
    expect((await h.postB(h.creem.refundEvent(b.checkout, 121, 'ref_tax_early'))).outcome).toBe('not_paid:pending');
    expect((await h.postB(h.creem.completedEvent(b.checkout, taxed(300, 63)))).outcome).toBe('credited');
    expect(await h.balance(b.user.token)).toBe(2000);
    expect(await h.reversalsOf(b.tradeNo)).toEqual([expect.objectContaining({ kind: 'clawback', amount: -1000, ref: `${b.tradeNo}:at-credit` })]);
    await h.balanced(b.user.id, b.tradeNo);
  });
});

describe('providerA (Stripe): Adaptive Pricing (the customer paid in another currency)', () => {
  const paid = { status: 'complete' as const, payment_status: 'paid' as const };
  /** Sessions created before 2025-03-31: `currency`/`amount_total` are the customer's, the order's are in currency_conversion. */
  const legacy = (amount: number, eur: number) => ({
    ...paid, currency: 'eur', amount_total: eur, amount_subtotal: eur,
    currency_conversion: { amount_subtotal: amount, amount_total: amount, fx_rate: (eur / amount).toFixed(6), source_currency: 'usd' },
  }) as any;
  /** From 2025-03-31.basil: `currency`/`amount_total` stay the order's, the customer's are in presentment_details. */
  const basil = (eur: number) => ({ ...paid, presentment_details: { presentment_amount: eur, presentment_currency: 'eur' } }) as any;

  test('a legacy converted session is credited when its source amount and currency are the order\'s; its refunds and disputes in EUR take their share', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, legacy(500, 460)))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(5000);
    // The charge is in EUR: 230 of the 460 paid is half of the payment.
    const eurCharge = { ...session, currency: 'eur', amount_total: 460 };
    const t = Math.floor(Date.now() / 1000);
    expect((await h.postA(h.stripe.refundEvent(eurCharge, [230], undefined, t))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(2500);
    // The currency in capitals is the same currency.
    const upper = { ...eurCharge, currency: 'EUR' };
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', upper, 460, 'dp_eur'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_reinstated', upper, 460, 'dp_eur', 'won'))).outcome).toBe('dispute_reinstated');
    expect(await h.balance(user.token)).toBe(2500);
    await h.balanced(user.id, tradeNo);
  });

  test('a legacy converted session whose source amount or currency is not the order\'s is not credited', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    const off = legacy(500, 460);
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, { ...off, currency_conversion: { ...off.currency_conversion, amount_total: 499 } }))).outcome)
      .toBe('mismatch:amount 499 != 500');
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, { ...off, currency_conversion: { ...off.currency_conversion, source_currency: 'gbp' } }))).outcome)
      .toBe('mismatch:currency gbp != usd');
    // A converted session without its conversion is the customer's currency only: not the order's.
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, { ...off, currency_conversion: null }))).outcome).toBe('mismatch:amount 460 != 500');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.orderView(tradeNo, user.token)).status).toBe('pending');
  });

  test('a basil session with presentment details: refunds in EUR take their share, in USD theirs, and never more than the credit', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, basil(460)))).outcome).toBe('credited');
    const t = Math.floor(Date.now() / 1000);
    // A quarter of the EUR paid comes back: a quarter of the credit.
    expect((await h.postA(h.stripe.refundEvent({ ...session, currency: 'eur', amount_total: 460 }, [115], undefined, t - 5))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(3750);
    // A dispute stated in the order's currency: 250 of 500, half.
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 250, 'dp_usd'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(1250);
    // A second dispute of the whole payment: capped at the credit.
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', { ...session, currency: 'eur' }, 460, 'dp_eur_2'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.orderView(tradeNo, user.token)).clawed_back).toBe(5000);
    await h.balanced(user.id, tradeNo);
  });

  test('a refund in the customer\'s currency before the payment event is retried (409, nothing recorded); after the credit it takes its share', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    // Found by the charge's metadata (payment_intent_data), but EUR cannot be measured until the payment says it was paid in EUR.
    const refund = JSON.parse(h.stripe.refundEvent({ ...session, currency: 'eur', amount_total: 460 }, [230]));
    refund.data.object.metadata = { trade_no: tradeNo };
    const body = JSON.stringify(refund);
    const early = await h.deliver('providerA', body);
    expect([early.status, early.json.error?.code]).toEqual([409, 'currency_not_yet_known']);
    expect(await h.eventRow('providerA', body)).toBeFalsy();
    expect(await h.rowsOf(tradeNo)).toEqual([]);
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, legacy(500, 460)))).outcome).toBe('credited');
    expect(await h.orderView(tradeNo, user.token)).toMatchObject({ paid_amount: 460, paid_currency: 'eur' });
    expect((await h.postA(body)).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(2500);
    await h.balanced(user.id, tradeNo);
  });

  test('money stated in a currency the payment was not made in takes nothing and is recorded for an operator', async () => {
    const { user, tradeNo, session } = await h.orderA(500);
    expect((await h.postA(h.stripe.event('checkout.session.completed', session, basil(460)))).outcome).toBe('credited');
    const gbp = h.stripe.refundEvent({ ...session, currency: 'gbp', amount_total: 400 }, [400]);
    expect((await h.postA(gbp)).outcome).toBe('mismatch:currency gbp != usd');
    expect((await h.eventRow('providerA', gbp)).outcome).toBe('mismatch:currency gbp != usd');
    expect(await h.balance(user.token)).toBe(5000);
    expect(await h.rowsOf(tradeNo)).toEqual([]);
    await h.balanced(user.id, tradeNo);
  });
});
