/**
 * Refunds and disputes of paid top-ups over real HTTP, signed like the providers sign them (providerA with
 * the official `stripe` package's test-header helper, providerB with a computed HMAC). The user tops up,
 * spends through /v1/messages, and the payment is refunded or disputed: the refunded share of the credit is
 * taken back once (ledger kind clawback, ref naming the order), however often, in whatever order and however
 * concurrently the events arrive; a won dispute or a failed refund gives its share back once, and a dispute that
 * comes before its payment event is retried (409) until it applies. Each balance stays Σ ledger.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import Stripe from 'stripe';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startStripeDouble, type StripeDouble } from '../doubles/stripe-api';
import { startCreemDouble, type CreemDouble } from '../doubles/creem-api';
import { addChannel, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

const A_SECRET = 'whsec_test_refunds_a';
const B_SECRET = 'creem_whsec_refunds';
const MODEL = 'refund-model';
const sdk = new Stripe('sk_test_x');

let gw: TestGateway;
let stripe: StripeDouble;
let creem: CreemDouble;
let ant: Scripted;

beforeAll(async () => {
  stripe = startStripeDouble({ secretKey: 'sk_test_gw' });
  creem = startCreemDouble({ apiKey: 'creem_key', products: { prod_credits: 100 } });
  ant = upstream('anthropic', { text: 'ok', usage: { input: 1, output: 3000 } });
  gw = await startGateway({
    PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gw', PROVIDER_A_WEBHOOK_SECRET: A_SECRET,
    PROVIDER_B_API_BASE: creem.url, PROVIDER_B_API_KEY: 'creem_key', PROVIDER_B_WEBHOOK_SECRET: B_SECRET, PROVIDER_B_PRODUCT_ID: 'prod_credits',
    QUOTA_PER_UNIT: '10',
  });
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: [MODEL] });
  // 1 quota unit per output token, input free: a reply of 3000 tokens costs exactly 3000.
  await setPrice(gw, MODEL, { input: 0, output: 1_000_000 });
});
afterAll(async () => {
  await gw.stop();
  await stripe.stop();
  await creem.stop();
  await ant.stop();
});

async function deliver(provider: 'providerA' | 'providerB', body: string) {
  const h: Record<string, string> = provider === 'providerA'
    ? { 'stripe-signature': await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET }) }
    : { 'creem-signature': createHmac('sha256', B_SECRET).update(body).digest('hex') };
  const res = await fetch(`${gw.url}/api/${provider}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...h }, body });
  return { status: res.status, json: await res.json() as any };
}
async function post(provider: 'providerA' | 'providerB', body: string) {
  const { status, json } = await deliver(provider, body);
  expect(status).toBe(200);
  return json.data as { outcome: string; trade_no: string | null };
}
const postA = (body: string) => post('providerA', body);
const postB = (body: string) => post('providerB', body);

async function keyOf(token: string) {
  const r = await gw.api('POST', '/api/token/', { name: 'k' }, token);
  expect(r.status).toBe(200);
  return r.body.data.key as string;
}

/** A user with a key and a paid providerA order of `amount` cents (credit amount × 10). */
async function paidA(amount = 500) {
  const user = await makeUser(gw);
  const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerA' }, user.token);
  expect(r.status).toBe(200);
  const tradeNo = r.body.data.trade_no as string;
  const session = stripe.sessionFor(tradeNo);
  expect((await postA(stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' }))).outcome).toBe('credited');
  return { user, tradeNo, session, key: await keyOf(user.token) };
}

async function paidB(amount = 500) {
  const user = await makeUser(gw);
  const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerB' }, user.token);
  expect(r.status).toBe(200);
  const tradeNo = r.body.data.trade_no as string;
  const checkout = creem.checkoutFor(tradeNo);
  expect((await postB(creem.completedEvent(checkout))).outcome).toBe('credited');
  return { user, tradeNo, checkout };
}

const balance = async (token: string) => (await gw.api('GET', '/api/user/self', undefined, token)).body.data.quota as number;
const orderView = async (tradeNo: string, token: string) => (await gw.api('GET', `/api/topup/${tradeNo}`, undefined, token)).body.data;
const reversalsOf = (tradeNo: string) => gw.db.all("select * from ledger where kind in ('clawback', 'reinstate') and ref like ? order by id", `${tradeNo}:%`);
const eventRow = (provider: string, body: string) => gw.db.get('select * from webhook_events where provider = ? and event_id = ?', provider, JSON.parse(body).id);
async function balanced(userId: number) {
  expect((await gw.services.users.byId(userId))!.quota).toBe(await gw.services.ledger.sum(userId));
}

describe('providerA (Stripe): charge.refunded', () => {
  test('a full refund after spending takes the whole credit back: the balance goes negative and requests get 402', async () => {
    const { user, tradeNo, session, key } = await paidA(500);
    expect((await orderView(tradeNo, user.token))).toMatchObject({ status: 'paid', payment_ref: stripe.paymentIntentFor(session), clawed_back: 0 });
    expect((await send(gw, key, msg(MODEL, { max_tokens: 3000 }))).status).toBe(200);
    expect(await balance(user.token)).toBe(2000);

    const at = Math.floor(Date.now() / 1000);
    const body = stripe.refundEvent(session, [500], undefined, at);
    expect(await postA(body)).toEqual({ outcome: 'refunded', trade_no: tradeNo });
    expect(await balance(user.token)).toBe(-3000);
    const charge = `ch_${stripe.paymentIntentFor(session).slice(3)}`;
    expect(await reversalsOf(tradeNo)).toEqual([expect.objectContaining({
      user_id: user.id, kind: 'clawback', amount: -5000, balance_after: -3000, ref: `${tradeNo}:refund:${charge}:refunded:500@${at}`,
    })]);
    const self = await gw.api('GET', '/api/ledger/self', undefined, user.token);
    expect(self.body.data.items[0]).toMatchObject({ kind: 'clawback', amount: -5000, balance_after: -3000 });
    expect((await gw.api('GET', '/api/ledger/self?kind=clawback', undefined, user.token)).body.data.total).toBe(1);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(5000);
    expect((await eventRow('providerA', body)).outcome).toBe('refunded');
    // Admission reads the lowered balance at once: nothing more is served until a top-up.
    const refused = await send(gw, key, msg(MODEL, { max_tokens: 10 }));
    expect(refused.status).toBe(402);
    await balanced(user.id);
  });

  test('partial refunds in two events take back each share; a replayed smaller total changes nothing', async () => {
    const { user, tradeNo, session } = await paidA(500);
    // Dated explicitly: the replayed statement is the older one (dated "now", a second boundary made it the newer).
    const t = Math.floor(Date.now() / 1000);
    expect((await postA(stripe.refundEvent(session, [200], undefined, t - 1))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(3000);
    expect((await postA(stripe.refundEvent(session, [200, 500], undefined, t))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(0);
    expect((await reversalsOf(tradeNo)).map((r: any) => r.amount)).toEqual([-2000, -3000]);
    expect((await postA(stripe.refundEvent(session, [200], undefined, t - 1))).outcome).toBe('noop:refund already counted (500)');
    expect(await balance(user.token)).toBe(0);
    await balanced(user.id);
  });

  test('the same refund event twice and 20 times at once debits once; 20 distinct events with one total debit once', async () => {
    const { user, tradeNo, session } = await paidA(700);
    const body = stripe.refundEvent(session, [300]);
    const outcomes = (await Promise.all(Array.from({ length: 20 }, () => postA(body)))).map((r) => r.outcome);
    expect(outcomes.filter((o) => o === 'refunded')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(19);
    expect((await postA(body)).outcome).toBe('duplicate');
    const distinct = (await Promise.all(Array.from({ length: 20 }, () => postA(stripe.refundEvent(session, [300]))))).map((r) => r.outcome);
    expect(distinct.every((o) => o === 'noop:refund already counted (300)')).toBe(true);
    expect(await balance(user.token)).toBe(7000 - 3000);
    expect(await reversalsOf(tradeNo)).toHaveLength(1);
    await balanced(user.id);
  });

  test('out of order: a later running total first, the earlier one after, or all at once, end at the largest total', async () => {
    // Each statement is dated as Stripe would date it (a larger running total later): with both dated "now", two
    // events straddling a second made the smaller total the newer one, which is a failed refund's statement.
    const t = Math.floor(Date.now() / 1000);
    const a = await paidA(500);
    expect((await postA(stripe.refundEvent(a.session, [100, 300], undefined, t))).outcome).toBe('refunded');
    expect((await postA(stripe.refundEvent(a.session, [100], undefined, t - 1))).outcome).toBe('noop:refund already counted (300)');
    expect(await balance(a.user.token)).toBe(2000);
    await balanced(a.user.id);

    const b = await paidA(500);
    const steps = [[100], [100, 250], [100, 250, 400], [100, 250, 400, 450]];
    const bodies = [...steps, ...steps, ...steps].map((s) => stripe.refundEvent(b.session, s, undefined, t - 4 + s.length)).reverse();
    await Promise.all(bodies.map((x) => postA(x)));
    expect(await balance(b.user.token)).toBe(500);
    expect((await orderView(b.tradeNo, b.user.token)).clawed_back).toBe(4500);
    expect((await reversalsOf(b.tradeNo)).reduce((s: number, r: any) => s + r.amount, 0)).toBe(-4500);
    await balanced(b.user.id);
  });

  test('a refund for an unknown payment answers 200 unknown_order, is recorded and changes nothing', async () => {
    const { user, session } = await paidA(300);
    const stranger = stripe.refundEvent({ ...session, id: 'cs_test_not_ours' }, [300]);
    expect(await postA(stranger)).toEqual({ outcome: 'unknown_order', trade_no: null });
    expect((await eventRow('providerA', stranger)).outcome).toBe('unknown_order');
    expect(await balance(user.token)).toBe(3000);
    await balanced(user.id);
  });

  test('a refund that arrives before the payment event is recorded; the late credit is taken back with it', async () => {
    const user = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount: 400, provider: 'providerA' }, user.token);
    const tradeNo = r.body.data.trade_no as string;
    const session = stripe.sessionFor(tradeNo);
    // Found by the charge's metadata (payment_intent_data), since no payment id is known yet.
    const refund = JSON.parse(stripe.refundEvent(session, [100]));
    refund.data.object.metadata = { trade_no: tradeNo };
    expect((await postA(JSON.stringify(refund))).outcome).toBe('not_paid:pending');
    expect(await balance(user.token)).toBe(0);
    expect((await postA(stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' }))).outcome).toBe('credited');
    expect(await balance(user.token)).toBe(3000);
    expect(await reversalsOf(tradeNo)).toEqual([expect.objectContaining({ kind: 'clawback', amount: -1000, ref: `${tradeNo}:at-credit` })]);
    // The same total again is already counted.
    expect((await postA(stripe.refundEvent(session, [100]))).outcome).toBe('noop:refund already counted (100)');
    await balanced(user.id);
  });
});

describe('providerA (Stripe): disputes', () => {
  test('funds withdrawn take the disputed share; reinstated (won) gives it back once; replays change nothing', async () => {
    const { user, tradeNo, session, key } = await paidA(500);
    expect((await send(gw, key, msg(MODEL, { max_tokens: 3000 }))).status).toBe(200);
    expect((await postA(stripe.disputeEvent('charge.dispute.created', session, 500, 'dp_1'))).outcome).toMatch(/^noop:dispute opened/);
    expect(await balance(user.token)).toBe(2000);
    const withdrawn = stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 500, 'dp_1');
    const outcomes = (await Promise.all(Array.from({ length: 20 }, () => postA(withdrawn)))).map((r) => r.outcome);
    expect(outcomes.filter((o) => o === 'dispute_withdrawn')).toHaveLength(1);
    expect(await balance(user.token)).toBe(-3000);
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 500, 'dp_1'))).outcome).toBe('noop:dispute already withdrawn');
    expect((await send(gw, key, msg(MODEL, { max_tokens: 10 }))).status).toBe(402);

    const reinstated = stripe.disputeEvent('charge.dispute.funds_reinstated', session, 500, 'dp_1', 'won');
    expect((await postA(reinstated)).outcome).toBe('dispute_reinstated');
    expect(await balance(user.token)).toBe(2000);
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_reinstated', session, 500, 'dp_1', 'won'))).outcome).toBe('noop:dispute already reinstated');
    expect((await postA(stripe.disputeEvent('charge.dispute.closed', session, 500, 'dp_1', 'won'))).outcome).toBe('noop:dispute won');
    expect(await balance(user.token)).toBe(2000);
    expect((await reversalsOf(tradeNo)).map((r: any) => [r.kind, r.amount, r.ref])).toEqual([
      ['clawback', -5000, `${tradeNo}:dispute:dp_1:withdrawn:500`], ['reinstate', 5000, `${tradeNo}:dispute:dp_1:reinstated:0`],
    ]);
    expect((await send(gw, key, msg(MODEL, { max_tokens: 10 }))).status).toBe(200);
    await balanced(user.id);
  });

  test('a win delivered before the withdrawal: neither moves money', async () => {
    const { user, tradeNo, session } = await paidA(300);
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_reinstated', session, 300, 'dp_2', 'won'))).outcome).toBe('dispute_reinstated');
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 300, 'dp_2'))).outcome).toBe('noop:dispute already reinstated');
    expect(await balance(user.token)).toBe(3000);
    expect(await reversalsOf(tradeNo)).toEqual([]);
    await balanced(user.id);
  });

  test('a refund and a dispute of one order together never take back more than the credit', async () => {
    const { user, session } = await paidA(500);
    expect((await postA(stripe.refundEvent(session, [200]))).outcome).toBe('refunded');
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 500, 'dp_3'))).outcome).toBe('dispute_withdrawn');
    expect(await balance(user.token)).toBe(0);
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_reinstated', session, 500, 'dp_3', 'won'))).outcome).toBe('dispute_reinstated');
    expect(await balance(user.token)).toBe(3000);
    await balanced(user.id);
  });
});

describe('providerB (Creem): refund.created and dispute.created', () => {
  test('two partial refunds (expanded checkout, then ids only) each count once; a dispute takes its amount', async () => {
    const { user, tradeNo, checkout } = await paidB(500);
    expect((await orderView(tradeNo, user.token)).payment_ref).toBe(creem.orderFor(checkout));
    const first = creem.refundEvent(checkout, 100, 'ref_1');
    const outcomes = (await Promise.all(Array.from({ length: 20 }, () => postB(first)))).map((r) => r.outcome);
    expect(outcomes.filter((o) => o === 'refunded')).toHaveLength(1);
    expect(await balance(user.token)).toBe(4000);
    // The same refund in another event (a provider's resend under a new id) is already counted.
    expect((await postB(creem.refundEvent(checkout, 100, 'ref_1', { ids: true }))).outcome).toBe('noop:refund already counted (100)');
    expect((await postB(creem.refundEvent(checkout, 150, 'ref_2', { ids: true }))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(2500);
    expect((await postB(creem.refundEvent(checkout, 50, 'ref_3', { status: 'failed' }))).outcome).toBe('noop:refund failed');
    expect((await postB(creem.disputeEvent(checkout, 250, 'disp_1'))).outcome).toBe('dispute_withdrawn');
    expect(await balance(user.token)).toBe(0);
    expect((await reversalsOf(tradeNo)).map((r: any) => r.amount)).toEqual([-1000, -1500, -2500]);
    await balanced(user.id);
  });

  test('a won dispute recorded by root gives its hold back once, and a later refund is still taken back in full', async () => {
    const { user, tradeNo, checkout } = await paidB(500);
    expect((await postB(creem.disputeEvent(checkout, 500, 'disp_w'))).outcome).toBe('dispute_withdrawn');
    expect(await balance(user.token)).toBe(0);
    // Only root; the order's owner and a plain admin are refused.
    const admin = await makeUser(gw, 10);
    expect((await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {}, user.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {}, admin.token)).status).toBe(403);
    const unknown = await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, { dispute_id: 'disp_nope' });
    expect([unknown.status, unknown.body.error.code]).toEqual([404, 'dispute_not_found']);
    const won = await Promise.all(Array.from({ length: 5 }, () => gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {})));
    expect(won.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(won.map((r) => r.body.data.outcome).sort()).toEqual(['dispute_reinstated', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
    expect(won.find((r) => r.body.data.outcome === 'dispute_reinstated')!.body.data.credited).toBe(5000);
    expect(await balance(user.token)).toBe(5000);
    // Before, an operator's ledger adjustment restored the balance but left the dispute holding the order's money:
    // a full refund then took nothing back.
    expect((await postB(creem.refundEvent(checkout, 500, 'ref_after_win'))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(0);
    expect((await reversalsOf(tradeNo)).map((r: any) => [r.kind, r.amount])).toEqual([['clawback', -5000], ['reinstate', 5000], ['clawback', -5000]]);
    await balanced(user.id);
  });

  test('a reinstatement asked too early (no withdrawn dispute yet, or an unknown id) records nothing: asked again later, it applies', async () => {
    const { user, tradeNo, checkout } = await paidB(500);
    // Root acts before the dispute's event got through: 404, and the call must not be remembered as made.
    const early = await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {});
    expect([early.status, early.body.error.code]).toEqual([404, 'dispute_not_found']);
    const earlyNamed = await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, { dispute_id: 'disp_late' });
    expect([earlyNamed.status, earlyNamed.body.error.code]).toEqual([404, 'dispute_not_found']);
    expect((await postB(creem.disputeEvent(checkout, 500, 'disp_late'))).outcome).toBe('dispute_withdrawn');
    expect(await balance(user.token)).toBe(0);
    const won = await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {});
    expect([won.status, won.body.data]).toEqual([200, { outcome: 'dispute_reinstated', credited: 5000 }]);
    expect(await balance(user.token)).toBe(5000);
    // Named now, the same dispute's call is the one just made.
    expect((await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, { dispute_id: 'disp_late' })).body.data).toEqual({ outcome: 'duplicate', credited: 0 });
    await balanced(user.id);
  });

  test('a second dispute of one order, won later, is reinstated by a call without dispute_id like the first', async () => {
    const { user, tradeNo, checkout } = await paidB(500);
    expect((await postB(creem.disputeEvent(checkout, 200, 'disp_one'))).outcome).toBe('dispute_withdrawn');
    expect((await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {})).body.data).toEqual({ outcome: 'dispute_reinstated', credited: 2000 });
    expect((await postB(creem.disputeEvent(checkout, 300, 'disp_two'))).outcome).toBe('dispute_withdrawn');
    expect(await balance(user.token)).toBe(2000);
    expect((await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {})).body.data).toEqual({ outcome: 'dispute_reinstated', credited: 3000 });
    expect(await balance(user.token)).toBe(5000);
    await balanced(user.id);
  });

  test('a refund for an unknown checkout answers 200 unknown_order and changes nothing', async () => {
    const { user, checkout } = await paidB(200);
    const stranger = creem.refundEvent({ ...checkout, id: 'ch_stranger', request_id: 'tp_not_ours' }, 200, 'ref_x');
    expect(await postB(stranger)).toEqual({ outcome: 'unknown_order', trade_no: null });
    expect((await eventRow('providerB', stranger)).outcome).toBe('unknown_order');
    expect(await balance(user.token)).toBe(2000);
    await balanced(user.id);
  });
});

describe('providerA (Stripe): a refund that fails is given back', () => {
  // Stripe states `amount_refunded` net of the refunds failed by then; each event carries its own time.
  const t0 = Math.floor(Date.now() / 1000) - 10_000;
  const chargeOf = (session: { id: string }) => `ch_${stripe.paymentIntentFor(session as any).slice(3)}`;
  const refundId = (session: { id: string }, i: number) => `re_${stripe.paymentIntentFor(session as any).slice(3)}_${i}`;

  test('counted, then failed: its share comes back once; repeats, the same failure by another event type, and a stale larger total change nothing', async () => {
    const { user, tradeNo, session } = await paidA(500);
    expect((await postA(stripe.refundEvent(session, [200], undefined, t0))).outcome).toBe('refunded');
    const total = stripe.refundEvent(session, [200, 500], undefined, t0 + 10);
    expect((await postA(total)).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(0);

    // The second refund (300, created t0+10) fails at t0+100: 3000 of the credit is the user's again.
    const failed = stripe.refundUpdatedEvent(session, 1, 300, 'failed', { created: t0 + 100, refundCreated: t0 + 10 });
    const outcomes = (await Promise.all(Array.from({ length: 10 }, () => postA(failed)))).map((r) => r.outcome);
    expect(outcomes.sort()).toEqual([...Array(9).fill('duplicate'), 'refund_failed']);
    expect(await balance(user.token)).toBe(3000);
    expect((await postA(stripe.refundUpdatedEvent(session, 1, 300, 'failed', { created: t0 + 100, refundCreated: t0 + 10, type: 'refund.failed' }))).outcome)
      .toBe('noop:refund already failed');
    // A late delivery of a total stated before the failure (it included the failed refund).
    expect((await postA(stripe.refundEvent(session, [200, 500], undefined, t0 + 10))).outcome).toBe('noop:refund already counted (500)');
    expect((await postA(stripe.refundEvent(session, [200], undefined, t0))).outcome).toBe('noop:refund already counted (500)');
    expect(await balance(user.token)).toBe(3000);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(2000);
    const charge = chargeOf(session);
    expect((await reversalsOf(tradeNo)).map((r: any) => [r.kind, r.amount, r.ref])).toEqual([
      ['clawback', -2000, `${tradeNo}:refund:${charge}:refunded:200@${t0}`],
      ['clawback', -3000, `${tradeNo}:refund:${charge}:refunded:500@${t0 + 10}`],
      ['reinstate', 3000, `${tradeNo}:refund:${charge}:failed:${refundId(session, 1)}:failed:300@${t0 + 100}`],
    ]);

    // A new refund after the failure: Stripe's total (200 + 100) is already net of it, and is taken in full.
    expect((await postA(stripe.refundEvent(session, [200, 300], undefined, t0 + 200))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(2000);
    // The larger total stated before the failure is stale now.
    expect((await postA(stripe.refundEvent(session, [200, 500], undefined, t0 + 10))).outcome).toBe('noop:refund total 500 is older than the counted 300');
    expect(await balance(user.token)).toBe(2000);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(3000);
    await balanced(user.id);
  }, 15_000);

  test('failed before its total arrived: nothing is given back that was not taken, and the total then takes only the rest', async () => {
    const full = await paidA(500);
    const failed = stripe.refundUpdatedEvent(full.session, 0, 500, 'failed', { created: t0 + 100, refundCreated: t0 });
    expect(await postA(failed)).toEqual({ outcome: 'refund_failed', trade_no: full.tradeNo });
    expect(await balance(full.user.token)).toBe(5000);
    expect((await postA(stripe.refundEvent(full.session, [500], undefined, t0))).outcome).toBe('refunded');
    expect(await balance(full.user.token)).toBe(5000);
    expect(await reversalsOf(full.tradeNo)).toEqual([]);
    await balanced(full.user.id);

    // Two refunds, the second canceled before either total arrived; the totals then arrive newest first.
    const part = await paidA(500);
    expect((await postA(stripe.refundUpdatedEvent(part.session, 1, 300, 'canceled', { created: t0 + 100, refundCreated: t0 + 10 }))).outcome).toBe('refund_failed');
    expect((await postA(stripe.refundEvent(part.session, [200, 500], undefined, t0 + 10))).outcome).toBe('refunded');
    expect((await postA(stripe.refundEvent(part.session, [200], undefined, t0))).outcome).toBe('noop:refund already counted (500)');
    expect(await balance(part.user.token)).toBe(3000);
    expect((await orderView(part.tradeNo, part.user.token)).clawed_back).toBe(2000);
    await balanced(part.user.id);
  }, 15_000);

  test('a refund still pending or succeeded changes nothing; a failure of a refund newer than every total gives nothing back yet', async () => {
    const { user, tradeNo, session } = await paidA(500);
    expect((await postA(stripe.refundEvent(session, [200], undefined, t0))).outcome).toBe('refunded');
    expect((await postA(stripe.refundUpdatedEvent(session, 0, 200, 'succeeded', { created: t0 + 5, refundCreated: t0 }))).outcome).toBe('noop:refund succeeded');
    // Refund 1 (created t0+10) is in no total seen yet: its failure takes nothing out of the t0 total.
    expect((await postA(stripe.refundUpdatedEvent(session, 1, 300, 'failed', { created: t0 + 100, refundCreated: t0 + 10 }))).outcome).toBe('refund_failed');
    expect(await balance(user.token)).toBe(3000);
    // Its total arrives late: held net of the failure.
    expect((await postA(stripe.refundEvent(session, [200, 500], undefined, t0 + 10))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(3000);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(2000);
    await balanced(user.id);
  }, 15_000);

  test('a later update of a failed refund delivered before the failure itself: the failure keeps its earliest time', async () => {
    // R0 100 (t0), R1 200 (t0+5), R1 fails at t0+20, R2 50 (t0+30: total 150, net of R1), then R1 is updated again at
    // t0+40 (e.g. its metadata): Stripe sends a second event stating `failed`, created t0+40. Delivered before the failure's
    // own event, it must not date the failure after the t0+30 total, which is already net of it.
    const { user, tradeNo, session } = await paidA(500);
    expect((await postA(stripe.refundEvent(session, [100], undefined, t0))).outcome).toBe('refunded');
    expect((await postA(stripe.refundEvent(session, [100, 300], undefined, t0 + 5))).outcome).toBe('refunded');
    expect((await postA(stripe.refundEvent(session, [100, 150], undefined, t0 + 30))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(3500);
    const updatedLater = stripe.refundUpdatedEvent(session, 1, 200, 'failed', { created: t0 + 40, refundCreated: t0 + 5, type: 'refund.updated' });
    const failedAt = stripe.refundUpdatedEvent(session, 1, 200, 'failed', { created: t0 + 20, refundCreated: t0 + 5 });
    await postA(updatedLater);
    expect((await postA(failedAt)).outcome).toBe('refund_failed');
    // Stripe refunded 150 of 500 in the end: 1500 of the credit stays taken back.
    expect(await balance(user.token)).toBe(3500);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(1500);
    // Either order ends the same; a repeat of either changes nothing.
    expect((await postA(stripe.refundUpdatedEvent(session, 1, 200, 'failed', { created: t0 + 40, refundCreated: t0 + 5 }))).outcome).toBe('noop:refund already failed');
    expect((await postA(stripe.refundUpdatedEvent(session, 1, 200, 'failed', { created: t0 + 20, refundCreated: t0 + 5, type: 'refund.failed' }))).outcome).toBe('noop:refund already failed');
    expect(await balance(user.token)).toBe(3500);
    await balanced(user.id);
  }, 15_000);

  test('a charge counted before statement times were kept: an older smaller total delivered late takes nothing back', async () => {
    const { user, tradeNo, session } = await paidA(500);
    expect((await postA(stripe.refundEvent(session, [200, 500], undefined, t0 + 10))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(0);
    // As the migration leaves a row counted by the previous version: its total (gross = amount), no time.
    await gw.db.all("update topup_reversals set as_of = 0 where trade_no = ? and key like 'refund:%'", tradeNo);
    // The first refund's event, created before the counted total (Stripe retried it after a failed delivery).
    expect((await postA(stripe.refundEvent(session, [200], undefined, t0))).outcome).toBe('noop:refund already counted (500)');
    expect(await balance(user.token)).toBe(0);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(5000);
    // A total stated well after the row was counted is the newer one, smaller or not (a refund of it failed since).
    expect((await postA(stripe.refundEvent(session, [200, 300], undefined, Math.floor(Date.now() / 1000) + 3600))).outcome).toBe('refunded');
    expect(await balance(user.token)).toBe(2000);
    await balanced(user.id);
  }, 15_000);

  test('all of it at once, three times over, in any order: the same end, and never more given back than taken', async () => {
    const { user, tradeNo, session } = await paidA(500);
    const events = [
      stripe.refundEvent(session, [200], undefined, t0),
      stripe.refundEvent(session, [200, 500], undefined, t0 + 10),
      stripe.refundUpdatedEvent(session, 1, 300, 'failed', { created: t0 + 100, refundCreated: t0 + 10 }),
      stripe.refundUpdatedEvent(session, 1, 300, 'failed', { created: t0 + 100, refundCreated: t0 + 10, type: 'refund.failed' }),
      stripe.refundEvent(session, [200, 300], undefined, t0 + 200),
    ];
    const all = [...events, ...events, ...events].sort(() => Math.random() - 0.5);
    await Promise.all(all.map((b) => postA(b)));
    expect(await balance(user.token)).toBe(2000);
    expect((await orderView(tradeNo, user.token)).clawed_back).toBe(3000);
    const entries = await reversalsOf(tradeNo);
    expect(entries.reduce((s: number, r: any) => s + r.amount, 0)).toBe(-3000);
    expect(entries.filter((r: any) => r.kind === 'reinstate').reduce((s: number, r: any) => s + r.amount, 0))
      .toBeLessThanOrEqual(-entries.filter((r: any) => r.kind === 'clawback').reduce((s: number, r: any) => s + r.amount, 0));
    await balanced(user.id);
  }, 15_000);
});

describe('providerA (Stripe): a refund or dispute whose payment no order knows yet', () => {
  test('is ours by the PaymentIntent\'s metadata (asked of the API): recorded at once, and the credit is taken back by its share', async () => {
    const user = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, user.token);
    const tradeNo = r.body.data.trade_no as string;
    const session = stripe.sessionFor(tradeNo);
    const pi = stripe.paymentIntentFor(session);
    const withdrawn = stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 200, 'dp_early');
    const early = (await Promise.all(Array.from({ length: 5 }, () => postA(withdrawn)))).map((x) => x.outcome);
    expect(early.sort()).toEqual(['duplicate', 'duplicate', 'duplicate', 'duplicate', 'not_paid:pending']);
    expect((await eventRow('providerA', withdrawn)).outcome).toBe('not_paid:pending');
    expect(stripe.requests.some((q) => q.method === 'GET' && q.path === `/v1/payment_intents/${pi}` && q.headers.authorization === 'Bearer sk_test_gw')).toBe(true);
    // A refund whose Charge does not carry the trade no (Stripe does not copy the PaymentIntent's metadata onto it):
    // it used to be recorded unknown_order, and the late credit was then kept in full.
    const t = Math.floor(Date.now() / 1000);
    expect((await postA(stripe.refundEvent(session, [100], undefined, t))).outcome).toBe('not_paid:pending');
    expect((await postA(stripe.refundUpdatedEvent(session, 0, 100, 'failed', { created: t + 1, refundCreated: t }))).outcome).toBe('not_paid:pending');
    expect(await balance(user.token)).toBe(0);

    expect((await postA(stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' }))).outcome).toBe('credited');
    // The dispute holds 200 of 500 (the refund of 100 failed): 2000 of the 5000 credit is taken straight back.
    expect(await balance(user.token)).toBe(3000);
    expect(await reversalsOf(tradeNo)).toEqual([expect.objectContaining({ kind: 'clawback', amount: -2000, ref: `${tradeNo}:at-credit` })]);
    expect((await postA(withdrawn)).outcome).toBe('duplicate');
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 200, 'dp_early'))).outcome).toBe('noop:dispute already withdrawn');
    expect(await balance(user.token)).toBe(3000);
    await balanced(user.id);
  }, 15_000);

  test('a payment that is not ours (the API does not know it, or it names no order of ours) is recorded unknown_order at once, changing nothing', async () => {
    const { user, session } = await paidA(300);
    const stranger = stripe.disputeEvent('charge.dispute.funds_withdrawn', { ...session, id: 'cs_test_not_ours' }, 300, 'dp_x');
    expect(await postA(stranger)).toEqual({ outcome: 'unknown_order', trade_no: null });
    expect((await eventRow('providerA', stranger)).outcome).toBe('unknown_order');
    // A PaymentIntent of the same account made elsewhere (a payment link): no trade no in its metadata.
    stripe.foreignPaymentIntents.add('pi_elsewhere');
    const elsewhere = JSON.parse(stranger);
    elsewhere.id = 'evt_elsewhere';
    elsewhere.data.object.payment_intent = 'pi_elsewhere';
    expect((await postA(JSON.stringify(elsewhere))).outcome).toBe('unknown_order');
    expect(await balance(user.token)).toBe(3000);
    await balanced(user.id);
  }, 15_000);

  test('while the API cannot answer, it is answered 409 and recorded nowhere; the retry applies it once', async () => {
    const user = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, user.token);
    const session = stripe.sessionFor(r.body.data.trade_no);
    const withdrawn = stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 200, 'dp_api_down');
    stripe.failLookups = true;
    try {
      const early = await deliver('providerA', withdrawn);
      expect(early.status).toBe(409);
      expect(early.json.error).toMatchObject({ code: 'order_not_yet_known', message: expect.stringContaining(stripe.paymentIntentFor(session)) });
      expect(await eventRow('providerA', withdrawn)).toBeFalsy();
    } finally {
      stripe.failLookups = false;
    }
    expect((await postA(stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' }))).outcome).toBe('credited');
    const retries = (await Promise.all(Array.from({ length: 5 }, () => postA(withdrawn)))).map((x) => x.outcome);
    expect(retries.sort()).toEqual(['dispute_withdrawn', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
    expect(await balance(user.token)).toBe(3000);
    await balanced(user.id);
  }, 15_000);
});
