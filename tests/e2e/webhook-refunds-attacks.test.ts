/**
 * Refund and dispute events as a hostile or merely chaotic sender delivers them, each correctly signed unless said
 * otherwise: resends of a dispute's funds events under new ids and with other amounts, amounts of 0 and far above the
 * order, currency spelled in capitals, an event that names one user's order and another user's payment, a stale
 * signature, events before their payment, and a refund and a dispute of one payment delivered at once. After each,
 * the balance is Σ ledger and no order has given back more than it credited. One test pins the exact reversal rows
 * and ledger refs of a fixed sequence: the same literal expectation runs on SQLite and on PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { CLUSTER_NODES } from '../helpers/gateway';
import { startPayments, type PaymentsHarness } from './payment-webhooks-setup';

let h: PaymentsHarness;
beforeAll(async () => { h = await startPayments(); });
afterAll(async () => { await h.stop(); });

const paidSession = { status: 'complete' as const, payment_status: 'paid' as const };

async function paidA(amount: number) {
  const o = await h.orderA(amount);
  expect((await h.postA(h.stripe.event('checkout.session.completed', o.session, paidSession))).outcome).toBe('credited');
  return o;
}
async function paidB(amount: number) {
  const o = await h.orderB(amount);
  expect((await h.postB(h.creem.completedEvent(o.checkout))).outcome).toBe('credited');
  return o;
}

describe('a dispute\'s funds events delivered again', () => {
  test('providerA: a second funds_withdrawn (new event id, same or other amount, 10 at once) and a second funds_reinstated are recorded no-ops', async () => {
    const { user, tradeNo, session } = await paidA(500);
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 300, 'dp_re'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(2000);
    const again = h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 300, 'dp_re');
    expect((await h.postA(again)).outcome).toBe('noop:dispute already withdrawn');
    expect((await h.eventRow('providerA', again)).outcome).toBe('noop:dispute already withdrawn');
    const more = (await Promise.all([500, 400, 300, 1, 0, 500, 499, 300, 200, 100].map((a) =>
      h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, a, 'dp_re'))))).map((r) => r.outcome);
    expect(more.every((o) => o.startsWith('noop:dispute already withdrawn'))).toBe(true);
    expect(more).toContain('noop:dispute already withdrawn (300; this event states 500)');
    expect(await h.balance(user.token)).toBe(2000);

    const won = await Promise.all(Array.from({ length: 5 }, () => h.postA(h.stripe.disputeEvent('charge.dispute.funds_reinstated', session, 300, 'dp_re', 'won'))));
    expect(won.map((r) => r.outcome).sort()).toEqual(['dispute_reinstated', ...Array(4).fill('noop:dispute already reinstated')]);
    expect(await h.balance(user.token)).toBe(5000);
    // A withdrawal delivered after the win (a resend) takes nothing.
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 500, 'dp_re'))).outcome).toBe('noop:dispute already reinstated');
    expect(await h.balance(user.token)).toBe(5000);
    expect((await h.reversalsOf(tradeNo)).map((r: any) => [r.kind, Number(r.amount)])).toEqual([['clawback', -3000], ['reinstate', 3000]]);
    await h.balanced(user.id, tradeNo);
  });

  test('a withdrawal of 0 holds nothing and does not stand in the way of the dispute\'s real withdrawal', async () => {
    const a = await paidA(500);
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', a.session, 0, 'dp_zero'))).outcome).toBe('noop:dispute withdrew 0');
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', a.session, 500, 'dp_zero'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(a.user.token)).toBe(0);
    await h.balanced(a.user.id, a.tradeNo);
    const b = await paidB(500);
    expect((await h.postB(h.creem.disputeEvent(b.checkout, 0, 'disp_zero'))).outcome).toBe('noop:dispute withdrew 0');
    expect((await h.postB(h.creem.disputeEvent(b.checkout, 250, 'disp_zero'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(b.user.token)).toBe(2500);
    await h.balanced(b.user.id, b.tradeNo);
  });

  test('providerB: dispute.created again under new ids, with other amounts, takes nothing more', async () => {
    const { user, tradeNo, checkout } = await paidB(400);
    expect((await h.postB(h.creem.disputeEvent(checkout, 100, 'disp_re'))).outcome).toBe('dispute_withdrawn');
    const again = await Promise.all([100, 400, 4000].map((a) => h.postB(h.creem.disputeEvent(checkout, a, 'disp_re'))));
    expect(again.map((r) => r.outcome)).toEqual(['noop:dispute already withdrawn', 'noop:dispute already withdrawn (100; this event states 400)',
      'noop:dispute already withdrawn (100; this event states 4000)']);
    expect(await h.balance(user.token)).toBe(3000);
    await h.balanced(user.id, tradeNo);
  });
});

describe('amounts and currencies', () => {
  test('0 moves nothing; amounts far above the order take exactly the credit; a non-integer or unsafe amount is a 400 recording nothing', async () => {
    const { user, tradeNo, session } = await paidA(300);
    const t = Math.floor(Date.now() / 1000);
    expect((await h.postA(h.stripe.refundEvent(session, [0], undefined, t - 10))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(3000);
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 1_000_000_000, 'dp_huge'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(0);
    expect((await h.postA(h.stripe.refundEvent(session, [9_000_000_000_000], undefined, t))).outcome).toBe('refunded');
    expect(await h.balance(user.token)).toBe(0);
    for (const bad of [1.5, -1, 2 ** 53, '300']) {
      const body = JSON.parse(h.stripe.refundEvent(session, [300], undefined, t + 1));
      body.data.object.amount_refunded = bad;
      const r = await h.deliver('providerA', JSON.stringify(body));
      expect([r.status, r.json.error?.code]).toEqual([400, 'invalid_payload']);
      expect(await h.eventRow('providerA', JSON.stringify(body))).toBeFalsy();
    }
    expect((await h.orderView(tradeNo, user.token)).clawed_back).toBe(3000);
    await h.balanced(user.id, tradeNo);

    const b = await paidB(200);
    expect((await h.postB(h.creem.refundEvent(b.checkout, 0, 'ref_zero'))).outcome).toBe('noop:refund of 0');
    expect((await h.postB(h.creem.refundEvent(b.checkout, 100, 'ref_zero'))).outcome).toBe('refunded');
    expect(await h.balance(b.user.token)).toBe(1000);
    expect((await h.postB(h.creem.refundEvent(b.checkout, 10 ** 12, 'ref_huge'))).outcome).toBe('refunded');
    expect(await h.balance(b.user.token)).toBe(0);
    await h.balanced(b.user.id, b.tradeNo);
  });

  test('a currency in capitals or mixed case is the order\'s currency; another one takes nothing', async () => {
    const { user, tradeNo, session } = await paidA(400);
    expect((await h.postA(h.stripe.refundEvent({ ...session, currency: 'USD' }, [100]))).outcome).toBe('refunded');
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', { ...session, currency: 'UsD' }, 100, 'dp_case'))).outcome).toBe('dispute_withdrawn');
    expect(await h.balance(user.token)).toBe(2000);
    expect((await h.postA(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', { ...session, currency: 'usd ' }, 400, 'dp_space'))).outcome).toBe('mismatch:currency usd  != usd');
    expect(await h.balance(user.token)).toBe(2000);
    await h.balanced(user.id, tradeNo);
  });
});

describe('events that name someone else\'s order or come from the wrong place', () => {
  test('a refund naming one user\'s order by trade no and another user\'s payment takes from neither', async () => {
    const victim = await paidB(300);
    const payer = await paidB(300);
    // Creem: the victim's checkout (expanded, with its request_id) and the payer's order id.
    const body = JSON.parse(h.creem.refundEvent(victim.checkout, 300, 'ref_cross'));
    body.object.order = h.creem.orderFor(payer.checkout);
    expect((await h.postB(JSON.stringify(body))).outcome).toBe('mismatch:payment');
    // Stripe: the victim's trade no in the charge's metadata, the payer's PaymentIntent.
    const a = await paidA(300);
    const b = await paidA(300);
    const charge = JSON.parse(h.stripe.refundEvent(b.session, [300]));
    charge.data.object.metadata = { trade_no: a.tradeNo };
    expect((await h.postA(JSON.stringify(charge))).outcome).toBe('mismatch:payment');
    for (const o of [victim, payer, a, b]) {
      expect(await h.balance(o.user.token)).toBe(3000);
      await h.balanced(o.user.id, o.tradeNo);
    }
  });

  test('a refund signed with an old or future timestamp, or by the other provider\'s scheme, is a 400 and records nothing', async () => {
    const { user, session, checkout } = { ...(await paidA(300)), ...(await paidB(300)) };
    const body = h.stripe.refundEvent(session, [300]);
    const now = Math.floor(Date.now() / 1000);
    // Clear of the tolerance by seconds: the clock moves on while the earlier deliveries run.
    for (const ts of [now - 301, now + 305, now - 86_400]) {
      const r = await h.deliver('providerA', body, ts);
      expect([r.status, r.json.error?.code]).toEqual([400, 'stale_signature']);
    }
    expect(await h.eventRow('providerA', body)).toBeFalsy();
    // A Creem-signed Stripe event and a Stripe-signed Creem event.
    const crossed = await fetch(`${h.gw.url}/api/providerB/webhook`, { method: 'POST', headers: { 'stripe-signature': `t=${now},v1=00` }, body: h.creem.refundEvent(checkout, 300, 'ref_x') });
    expect(crossed.status).toBe(400);
    expect(await h.balance(user.token)).toBe(3000);
  });
});

describe('the PaymentIntent lookup asked with an id taken from the event', () => {
  test('an id that is no PaymentIntent id (dot segments, a path, a query, 10,000 characters) is not asked of the API: unknown_order, nothing changes', async () => {
    const { user, session, tradeNo } = await paidA(300);
    const before = h.stripe.requests.length;
    const hostile = ['..', '.', 'pi_x/../../v1/customers', 'pi_x?expand[]=customer', 'pi_x#frag', `pi_${'a'.repeat(10_000)}`, 'pi_with space', 'pi_\u00e9'];
    for (const [i, ref] of hostile.entries()) {
      const body = JSON.parse(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 300, `dp_hostile_${i}`));
      body.data.object.payment_intent = ref;
      expect({ ref: ref.slice(0, 40), ...(await h.postA(JSON.stringify(body))) }).toEqual({ ref: ref.slice(0, 40), outcome: 'unknown_order', trade_no: null });
    }
    // Every path the API saw is one PaymentIntent's: "." and ".." used to reach GET /v1/ and /v1/payment_intents/ with the secret key.
    const asked = h.stripe.requests.slice(before).map((q) => q.path);
    expect(asked.filter((path) => !/^\/v1\/payment_intents\/pi_[A-Za-z0-9]{1,255}$/.test(path))).toEqual([]);
    expect(await h.balance(user.token)).toBe(3000);
    await h.balanced(user.id, tradeNo);
  }, 15_000);

  test('one signed event delivered 20 times at once while the API is slow asks the API once; many payments at once are asked a few at a time', async () => {
    const o = await h.orderA(500);
    const pi = h.stripe.paymentIntentFor(o.session);
    const withdrawn = h.stripe.disputeEvent('charge.dispute.funds_withdrawn', o.session, 200, 'dp_flood');
    const asked = (id: string) => h.stripe.requests.filter((q) => q.method === 'GET' && q.path === `/v1/payment_intents/${id}`).length;
    h.stripe.lookupDelayMs = 300;
    try {
      const outcomes = (await Promise.all(Array.from({ length: 20 }, () => h.postA(withdrawn)))).map((x) => x.outcome);
      expect(outcomes.filter((x) => x !== 'duplicate')).toEqual(['not_paid:pending']);
      // Once per process (each node of a cluster asks once).
      expect(asked(pi)).toBeLessThanOrEqual(CLUSTER_NODES);
      // 30 different payments at once (each a stranger's dispute): never more than 8 lookups in flight per process;
      // the rest are the retryable 409 order_not_yet_known, recording nothing. Counted at the API while in flight:
      // a total would also count a delivery that reached its node (a loaded machine, a proxy) after a lookup ended.
      const before = h.stripe.requests.length;
      h.stripe.lookupsAtOnceMax = 0;
      const strangers = Array.from({ length: 30 }, (_, i) => {
        const b = JSON.parse(h.stripe.disputeEvent('charge.dispute.funds_withdrawn', o.session, 100, `dp_stranger_${i}`));
        b.data.object.payment_intent = `pi_stranger${i}`;
        return JSON.stringify(b);
      });
      const answers = await Promise.all(strangers.map((b) => h.deliver('providerA', b)));
      const lookups = h.stripe.requests.length - before;
      expect(h.stripe.lookupsAtOnceMax).toBeGreaterThan(1);
      expect(h.stripe.lookupsAtOnceMax).toBeLessThanOrEqual(8 * CLUSTER_NODES);
      if (CLUSTER_NODES === 1) expect(lookups).toBeLessThan(30);
      expect(answers.filter((a) => a.status === 200).length).toBe(lookups);
      for (const a of answers.filter((x) => x.status !== 200)) expect({ status: a.status, code: a.json.error?.code }).toEqual({ status: 409, code: 'order_not_yet_known' });
      for (const [i, a] of answers.entries()) if (a.status === 409) expect(await h.eventRow('providerA', strangers[i]!)).toBeFalsy();
    } finally {
      h.stripe.lookupDelayMs = 0;
    }
    expect((await h.postA(h.stripe.event('checkout.session.completed', o.session, paidSession))).outcome).toBe('credited');
    expect(await h.balance(o.user.token)).toBe(3000);
    await h.balanced(o.user.id, o.tradeNo);
  }, 20_000);
});

describe('out of order and at once', () => {
  test('providerB: a dispute before its checkout.completed (named by checkout and order ids only) is taken back at credit', async () => {
    const { user, tradeNo, checkout } = await h.orderB(500);
    expect((await h.postB(h.creem.disputeEvent(checkout, 200, 'disp_early'))).outcome).toBe('not_paid:pending');
    expect((await h.postB(h.creem.completedEvent(checkout))).outcome).toBe('credited');
    expect(await h.balance(user.token)).toBe(3000);
    expect((await h.postB(h.creem.disputeEvent(checkout, 200, 'disp_early'))).outcome).toBe('noop:dispute already withdrawn');
    await h.balanced(user.id, tradeNo);
  });

  test('a full refund and a full dispute of one payment, each delivered 8 times at once with the payment event: exactly the credit is taken', async () => {
    const a = await h.orderA(500);
    const b = await h.orderB(500);
    const t = Math.floor(Date.now() / 1000);
    const bodies: Array<['providerA' | 'providerB', string]> = [];
    for (let i = 0; i < 8; i++) {
      bodies.push(['providerA', h.stripe.refundEvent(a.session, [500], undefined, t)]);
      bodies.push(['providerA', h.stripe.disputeEvent('charge.dispute.funds_withdrawn', a.session, 500, 'dp_race')]);
      bodies.push(['providerB', h.creem.refundEvent(b.checkout, 500, 'ref_race')]);
      bodies.push(['providerB', h.creem.disputeEvent(b.checkout, 500, 'disp_race')]);
    }
    bodies.push(['providerA', h.stripe.event('checkout.session.completed', a.session, paidSession)]);
    bodies.push(['providerB', h.creem.completedEvent(b.checkout)]);
    const answers = await Promise.all(bodies.sort(() => Math.random() - 0.5).map(([p, body]) => h.deliver(p, body)));
    // A Stripe dispute racing ahead of its payment's lookup may be asked to retry; every other answer is a 200.
    expect(answers.every((r) => r.status === 200 || (r.status === 409 && r.json.error.code === 'order_not_yet_known'))).toBe(true);
    for (const [p, body] of bodies) if (p === 'providerA') await h.deliver(p, body);
    for (const o of [a, b]) {
      expect(await h.balance(o.user.token)).toBe(0);
      expect((await h.orderView(o.tradeNo, o.user.token)).clawed_back).toBe(5000);
      await h.balanced(o.user.id, o.tradeNo);
    }
  }, 20_000);
});

describe('the same reversal rows and ledger refs on every backend', () => {
  test('a fixed sequence of refunds, a failed refund and disputes ends in exactly these rows', async () => {
    const t0 = 1_800_000_000;
    const a = await paidA(500);
    const pi = h.stripe.paymentIntentFor(a.session).slice(3);
    for (const body of [
      h.stripe.refundEvent(a.session, [100], undefined, t0),
      h.stripe.refundEvent(a.session, [100, 250], undefined, t0 + 10),
      h.stripe.refundUpdatedEvent(a.session, 1, 150, 'failed', { created: t0 + 20, refundCreated: t0 + 10 }),
      h.stripe.disputeEvent('charge.dispute.funds_withdrawn', a.session, 200, 'dp_pin'),
      h.stripe.disputeEvent('charge.dispute.funds_reinstated', a.session, 200, 'dp_pin', 'won'),
      h.stripe.disputeEvent('charge.dispute.funds_withdrawn', a.session, 50, 'dp_pin2'),
    ]) await h.postA(body);
    expect((await h.rowsOf(a.tradeNo)).map((r: any) => [r.key, r.state, Number(r.amount), Number(r.gross), Number(r.as_of), Number(r.since)])).toEqual([
      ['dispute:dp_pin', 'reinstated', 0, 0, 0, 0],
      ['dispute:dp_pin2', 'withdrawn', 50, 0, 0, 0],
      [`refund:ch_${pi}`, 'refunded', 100, 250, t0 + 10, 0],
      [`refund:ch_${pi}:failed:re_${pi}_1`, 'failed', 0, 150, t0 + 20, t0 + 10],
    ]);
    expect((await h.reversalsOf(a.tradeNo)).map((r: any) => [r.kind, Number(r.amount), r.ref])).toEqual([
      ['clawback', -1000, `${a.tradeNo}:refund:ch_${pi}:refunded:100@${t0}`],
      ['clawback', -1500, `${a.tradeNo}:refund:ch_${pi}:refunded:250@${t0 + 10}`],
      ['reinstate', 1500, `${a.tradeNo}:refund:ch_${pi}:failed:re_${pi}_1:failed:150@${t0 + 20}`],
      ['clawback', -2000, `${a.tradeNo}:dispute:dp_pin:withdrawn:200`],
      ['reinstate', 2000, `${a.tradeNo}:dispute:dp_pin:reinstated:0`],
      ['clawback', -500, `${a.tradeNo}:dispute:dp_pin2:withdrawn:50`],
    ]);
    expect(await h.balance(a.user.token)).toBe(3500);
    await h.balanced(a.user.id, a.tradeNo);

    const b = await h.orderB(500);
    expect((await h.postB(h.creem.refundEvent(b.checkout, 55, 'ref_pin_early'))).outcome).toBe('not_paid:pending');
    expect((await h.postB(h.creem.completedEvent(b.checkout, { sub_total: 500, tax_amount: 50, amount_paid: 550 }))).outcome).toBe('credited');
    for (const body of [h.creem.refundEvent(b.checkout, 110, 'ref_pin'), h.creem.disputeEvent(b.checkout, 165, 'disp_pin')]) await h.postB(body);
    expect((await h.rowsOf(b.tradeNo)).map((r: any) => [r.key, r.state, Number(r.amount), Number(r.gross), Number(r.as_of), Number(r.since)])).toEqual([
      ['dispute:disp_pin', 'withdrawn', 165, 0, 0, 0],
      ['refund:ref_pin', 'refunded', 110, 0, 0, 0],
      ['refund:ref_pin_early', 'refunded', 55, 0, 0, 0],
    ]);
    expect((await h.reversalsOf(b.tradeNo)).map((r: any) => [r.kind, Number(r.amount), r.ref])).toEqual([
      ['clawback', -500, `${b.tradeNo}:at-credit`],
      ['clawback', -1000, `${b.tradeNo}:refund:ref_pin:refunded:110`],
      ['clawback', -1500, `${b.tradeNo}:dispute:disp_pin:withdrawn:165`],
    ]);
    expect(await h.orderView(b.tradeNo, b.user.token)).toMatchObject({ paid_amount: 550, paid_currency: 'usd', clawed_back: 3000 });
    await h.balanced(b.user.id, b.tradeNo);
  }, 15_000);
});
