/**
 * Payment webhooks over real HTTP: providerA signatures made with the official `stripe`
 * package's test-header helper, providerB with a computed HMAC. Every scenario checks what changed
 * (orders, ledger, webhook_events) and that each balance still equals its ledger sum.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import Stripe from 'stripe';
import { ON_PG, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startStripeDouble, type StripeDouble, type StripeSession } from '../doubles/stripe-api';
import { startCreemDouble, type CreemDouble } from '../doubles/creem-api';

const A_SECRET = 'whsec_test_provider_a';
const B_SECRET = 'creem_whsec_test';
// Only the signing helper is used: no request ever leaves the machine. Under Bun the package loads its
// worker build (WebCrypto), whose synchronous generateTestHeaderString throws; the async twin is the same helper.
const sdk = new Stripe('sk_test_x');

let gw: TestGateway;
let stripe: StripeDouble;
let creem: CreemDouble;
const changed: number[] = [];

beforeAll(async () => {
  stripe = startStripeDouble({ secretKey: 'sk_test_gw' });
  creem = startCreemDouble({ apiKey: 'creem_key', products: { prod_credits: 100, prod_other: 100 } });
  gw = await startGateway({
    PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gw', PROVIDER_A_WEBHOOK_SECRET: A_SECRET,
    PROVIDER_B_API_BASE: creem.url, PROVIDER_B_API_KEY: 'creem_key', PROVIDER_B_WEBHOOK_SECRET: B_SECRET, PROVIDER_B_PRODUCT_ID: 'prod_credits',
    QUOTA_PER_UNIT: '10',
  });
  gw.services.bus.on('user.changed', ({ userId }) => { changed.push(userId); });
});
afterAll(async () => {
  await gw.stop();
  await stripe.stop();
  await creem.stop();
});

const now = () => Math.floor(Date.now() / 1000);
const sign = (payload: string, timestamp = now(), secret = A_SECRET) => sdk.webhooks.generateTestHeaderStringAsync({ payload, secret, timestamp });
const creemSign = (payload: string, secret = B_SECRET) => createHmac('sha256', secret).update(payload).digest('hex');

async function post(provider: 'providerA' | 'providerB', body: string, headers: Record<string, string>, base = gw.url) {
  const res = await fetch(`${base}/api/${provider}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: res.status, body: await res.json() as any };
}
async function postA(body: string, header?: string | null, base = gw.url) {
  const h = header === undefined ? await sign(body) : header;
  return post('providerA', body, h === null ? {} : { 'stripe-signature': h }, base);
}
const postB = (body: string, sig: string | null = creemSign(body)) => post('providerB', body, sig === null ? {} : { 'creem-signature': sig });

async function orderA(amount = 500) {
  const u = await makeUser(gw);
  const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerA' }, u.token);
  expect(r.status).toBe(200);
  return { user: u, tradeNo: r.body.data.trade_no as string, session: stripe.sessionFor(r.body.data.trade_no) };
}
const paid = (s: StripeSession, type = 'checkout.session.completed', over: Partial<StripeSession> = {}, id?: string) =>
  stripe.event(type, s, { status: 'complete', payment_status: 'paid', ...over }, id);

const order = async (tradeNo: string) => (await gw.db.get('select status, paid_at from topup_orders where trade_no = ?', tradeNo)) as { status: string; paid_at: number | null };
const credits = (tradeNo: string) => gw.db.all("select * from ledger where kind = 'topup' and ref = ?", tradeNo);
const eventRow = (provider: string, id: string) => gw.db.get('select * from webhook_events where provider = ? and event_id = ?', provider, id);
const balance = async (userId: number) => (await gw.services.users.byId(userId))!.quota;
async function balanced(userId: number) {
  expect(await balance(userId)).toBe(await gw.services.ledger.sum(userId));
}
const eventId = (body: string) => JSON.parse(body).id as string;

describe('providerA (Stripe scheme)', () => {
  test('a paid checkout.session.completed credits the order once; replays answer 200 and credit nothing', async () => {
    const { user, tradeNo, session } = await orderA(500);
    const body = paid(session);
    changed.length = 0;
    const r = await postA(body);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, data: { outcome: 'credited', trade_no: tradeNo } });
    expect((await order(tradeNo)).status).toBe('paid');
    expect((await order(tradeNo)).paid_at).toBeGreaterThan(0);
    expect((await credits(tradeNo))).toHaveLength(1);
    expect((await credits(tradeNo))[0]).toMatchObject({ user_id: user.id, amount: 5000, balance_after: 5000 });
    expect(await balance(user.id)).toBe(5000);
    expect(changed).toContain(user.id);
    expect((await eventRow('providerA', eventId(body))).outcome).toBe('credited');
    // Same bytes and header again, and a fresh signature (Stripe retries re-sign): duplicates.
    expect((await postA(body, await sign(body))).body.data.outcome).toBe('duplicate');
    expect((await postA(body)).body.data.outcome).toBe('duplicate');
    expect(await balance(user.id)).toBe(5000);
    expect((await credits(tradeNo))).toHaveLength(1);
    const self = await gw.api('GET', '/api/ledger/self', undefined, user.token);
    expect(self.body.data.items).toEqual([expect.objectContaining({ kind: 'topup', amount: 5000, ref: tradeNo })]);
    await balanced(user.id);
  });

  test('20 concurrent deliveries of one event credit exactly once', async () => {
    const { user, tradeNo, session } = await orderA(700);
    const body = paid(session);
    const results = await Promise.all(Array.from({ length: 20 }, () => postA(body)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    const outcomes = results.map((r) => r.body.data.outcome).sort();
    expect(outcomes.filter((o) => o === 'credited')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(19);
    expect((await credits(tradeNo))).toHaveLength(1);
    expect(await balance(user.id)).toBe(7000);
    await balanced(user.id);
  });

  test('different events for the same order (completed + async succeeded, 20 distinct ids at once) credit once', async () => {
    const { user, tradeNo, session } = await orderA(300);
    const bodies = [paid(session), paid(session, 'checkout.session.async_payment_succeeded'),
      ...Array.from({ length: 18 }, () => paid(session))];
    const results = await Promise.all(bodies.map((b) => postA(b)));
    const outcomes = results.map((r) => r.body.data.outcome);
    expect(outcomes.filter((o) => o === 'credited')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'not_pending:paid')).toHaveLength(19);
    expect((await credits(tradeNo))).toHaveLength(1);
    expect(await balance(user.id)).toBe(3000);
    await balanced(user.id);
  });

  test('missing, malformed, wrong-secret, tampered, downgraded and stale signatures are 400 and change nothing', async () => {
    const { user, tradeNo, session } = await orderA(400);
    const body = paid(session);
    const tampered = body.replace('"amount_total":400', '"amount_total":40000');
    expect(tampered).not.toBe(body);
    const cases: Array<[string, string | null, string]> = [
      [body, null, 'missing_signature'],
      [body, 'garbage', 'invalid_signature'],
      [body, `t=${now()}`, 'invalid_signature'],
      [body, await sign(body, now(), 'whsec_wrong'), 'invalid_signature'],
      [tampered, await sign(body), 'invalid_signature'],
      // A v0 (test scheme) signature, however correct, is never accepted: no downgrade.
      [body, await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET, scheme: 'v0' }), 'invalid_signature'],
      [body, await sign(body, now() - 301), 'stale_signature'],
      [body, await sign(body, now() - 3600), 'stale_signature'],
      ['', await sign(''), 'missing_body'],
    ];
    for (const [b, h, code] of cases) {
      const r = await postA(b, h);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code, type: 'invalid_request_error' });
      expect(Object.values(r.body.error).every((v) => typeof v === 'string')).toBe(true);
    }
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await credits(tradeNo))).toHaveLength(0);
    expect((await eventRow('providerA', eventId(body)))).toBeNull();
    expect(await balance(user.id)).toBe(0);
    // Inside the tolerance it still works afterwards.
    expect((await postA(body, await sign(body, now() - 250))).body.data.outcome).toBe('credited');
    await balanced(user.id);
  });

  test('a timestamp in the future beyond the tolerance is 400 like a stale one and changes nothing', async () => {
    const { user, tradeNo, session } = await orderA(420);
    const body = paid(session);
    // 301 s ahead flaked: a second boundary crossed between signing and checking made it 300 s ahead, inside the tolerance.
    for (const ahead of [305, 3600, 86_400 * 365]) {
      const r = await postA(body, await sign(body, now() + ahead));
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'stale_signature', param: 'stripe-signature', type: 'invalid_request_error' });
      expect(r.body.error.message).toContain('future');
    }
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await credits(tradeNo))).toHaveLength(0);
    expect((await eventRow('providerA', eventId(body)))).toBeNull();
    expect(await balance(user.id)).toBe(0);
    // Clock skew inside the tolerance is accepted.
    expect((await postA(body, await sign(body, now() + 250))).body.data.outcome).toBe('credited');
    await balanced(user.id);
  });

  test('a failure inside the transaction leaves nothing behind (500, so the provider retries); the retry credits', async () => {
    const { user, tradeNo, session } = await orderA(350);
    const body = paid(session);
    // The ledger's one-entry writer, which the top-up unit of work calls inside its transaction
    // (SQLite: write; PostgreSQL: apply with the transaction).
    const ledger = gw.services.ledger as unknown as Record<string, (...a: unknown[]) => unknown>;
    const method = ON_PG ? 'apply' : 'write';
    const original = ledger[method]!;
    // Simulates a crash after the event was claimed and the order marked paid, before the credit is written.
    ledger[method] = () => { throw new Error('simulated crash in the ledger write'); };
    let r;
    // The fault is in node 1's services, so the delivery goes to node 1 (behind the cluster proxy, too).
    try { r = await postA(body, undefined, gw.nodeUrl); } finally { ledger[method] = original; }
    expect(r.status).toBe(500);
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await eventRow('providerA', eventId(body)))).toBeNull();
    expect((await credits(tradeNo))).toHaveLength(0);
    expect(await balance(user.id)).toBe(0);
    expect((await postA(body)).body.data.outcome).toBe('credited');
    expect(await balance(user.id)).toBe(3500);
    await balanced(user.id);
  });

  test('a body over 1 MiB is refused with 413 before any processing', async () => {
    const body = JSON.stringify({ id: 'evt_big', type: 'checkout.session.completed', pad: 'x'.repeat(1024 * 1024) });
    const r = await postA(body);
    expect(r.status).toBe(413);
    expect(r.body.error.code).toBe('request_too_large');
    expect((await eventRow('providerA', 'evt_big'))).toBeNull();
  });

  test('several v1 signatures (secret rolling): any valid one is accepted', async () => {
    const { user, tradeNo, session } = await orderA(200);
    const body = paid(session);
    const t = now();
    const good = (await sign(body, t)).split('v1=')[1]!;
    const bad = (await sign(body, t, 'whsec_old')).split('v1=')[1]!;
    expect((await postA(body, `t=${t},v1=${bad},v0=${bad}`)).status).toBe(400);
    const r = await postA(body, `t=${t},v1=${bad},v1=${good},v0=${bad}`);
    expect(r.body.data.outcome).toBe('credited');
    expect((await credits(tradeNo))).toHaveLength(1);
    await balanced(user.id);
  });

  test('the raw bytes are verified: pretty-printed, non-ASCII JSON, any content type', async () => {
    const { user, tradeNo, session } = await orderA(250);
    const obj = JSON.parse(paid(session, 'checkout.session.completed', { metadata: { note: 'café ☕ "quoted"' } as any }));
    const body = `{\n  "id" :  ${JSON.stringify(obj.id)},\n${JSON.stringify(obj, null, 4).slice(1)}`;
    const res = await fetch(`${gw.url}/api/providerA/webhook`, { method: 'POST', headers: { 'content-type': 'text/plain', 'stripe-signature': await sign(body) }, body });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).data.outcome).toBe('credited');
    expect(await balance(user.id)).toBe(2500);
    expect((await order(tradeNo)).status).toBe('paid');
    await balanced(user.id);
  });

  test('a wrong amount or currency is not credited: 200, outcome recorded, order stays pending', async () => {
    const { user, tradeNo, session } = await orderA(600);
    const wrongAmount = paid(session, undefined, { amount_total: 599 });
    const r1 = await postA(wrongAmount);
    expect(r1.status).toBe(200);
    expect(r1.body.data.outcome).toBe('mismatch:amount 599 != 600');
    const wrongCurrency = paid(session, undefined, { currency: 'eur' });
    expect((await postA(wrongCurrency)).body.data.outcome).toBe('mismatch:currency eur != usd');
    const otherSession = paid(session, undefined, { id: 'cs_test_someone_else' });
    expect((await postA(otherSession)).body.data.outcome).toBe('mismatch:checkout');
    expect((await eventRow('providerA', eventId(wrongAmount))).outcome).toBe('mismatch:amount 599 != 600');
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await credits(tradeNo))).toHaveLength(0);
    expect(await balance(user.id)).toBe(0);
    // The genuine event still credits.
    expect((await postA(paid(session))).body.data.outcome).toBe('credited');
    expect(await balance(user.id)).toBe(6000);
    await balanced(user.id);
  });

  test('completed but unpaid waits; async_payment_succeeded then credits', async () => {
    const { user, tradeNo, session } = await orderA(150);
    const unpaid = stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'unpaid' });
    expect((await postA(unpaid)).body.data.outcome).toBe('noop:payment_status unpaid');
    expect((await order(tradeNo)).status).toBe('pending');
    expect(await balance(user.id)).toBe(0);
    expect((await postA(paid(session, 'checkout.session.async_payment_succeeded'))).body.data.outcome).toBe('credited');
    expect(await balance(user.id)).toBe(1500);
    await balanced(user.id);
  });

  test('async_payment_failed fails the order, expired expires it; neither can be credited afterwards', async () => {
    const f = await orderA(100);
    expect((await postA(stripe.event('checkout.session.async_payment_failed', f.session, { status: 'complete', payment_status: 'unpaid' }))).body.data.outcome).toBe('failed');
    expect((await order(f.tradeNo)).status).toBe('failed');
    expect((await postA(paid(f.session, 'checkout.session.async_payment_succeeded'))).body.data.outcome).toBe('not_pending:failed');
    // A payment that credits nothing is the operator's to refund: it is named in a warn line, not only in the event row.
    expect(gw.logs.some((l) => l.includes('topup.paid_not_credited') && l.includes(f.tradeNo) && l.includes('not_pending:failed'))).toBe(true);
    const e = await orderA(100);
    expect((await postA(stripe.event('checkout.session.expired', e.session, { status: 'expired' }))).body.data.outcome).toBe('expired');
    expect((await order(e.tradeNo)).status).toBe('expired');
    expect((await postA(stripe.event('checkout.session.expired', e.session, { status: 'expired' }))).body.data.outcome).toBe('not_pending:expired');
    expect(await balance(f.user.id) + await balance(e.user.id)).toBe(0);
    await balanced(f.user.id);
    await balanced(e.user.id);
  });

  test('unknown event kinds and unknown orders answer 200 and change nothing', async () => {
    const { user, tradeNo, session } = await orderA(100);
    const before = (await gw.db.get('select count(*) as n from webhook_events')) as any;
    const unknown = JSON.stringify({ id: 'evt_unknown_1', object: 'event', type: 'payment_intent.succeeded', data: { object: { id: 'pi_1', amount: 100 } } });
    const r = await postA(unknown);
    expect(r.status).toBe(200);
    expect(r.body.data.outcome).toBe('ignored');
    expect((await gw.db.get('select count(*) as n from webhook_events'))).toEqual(before);
    const stranger = paid({ ...session, client_reference_id: 'tp_not_an_order' });
    expect((await postA(stranger)).body.data.outcome).toBe('unknown_order');
    const foreign = paid({ ...session, client_reference_id: null });
    expect((await postA(foreign)).body.data.outcome).toBe('noop:no client_reference_id');
    expect((await order(tradeNo)).status).toBe('pending');
    expect(await balance(user.id)).toBe(0);
    // Signed but not an event: 400, nothing recorded.
    const notEvent = JSON.stringify({ hello: 'world' });
    expect((await postA(notEvent)).body.error.code).toBe('invalid_payload');
  });

  test('a signed field of an unexpected type is shown by its type, never a 500 (an object without a callable toString)', async () => {
    const { user, tradeNo, session } = await orderA(100);
    const odd = stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: { toString: 1 } as any });
    const r = await postA(odd);
    expect([r.status, r.body.data?.outcome]).toEqual([200, 'noop:payment_status object']);
    const dispute = JSON.stringify({ id: 'evt_odd_dispute', object: 'event', type: 'charge.dispute.closed', data: { object: { id: 'dp_odd', object: 'dispute', charge: 'ch_x', payment_intent: 'pi_x', amount: 100, currency: 'usd', status: { toString: 1 } } } });
    expect((await postA(dispute)).status).toBe(200);
    expect((await order(tradeNo)).status).toBe('pending');
    await balanced(user.id);
  });
});

describe('an order whose user was deleted', () => {
  test('a paid event answers 200 user_not_found, is recorded, and leaves the order pending for an operator', async () => {
    const { user, tradeNo, session } = await orderA(500);
    // The checkout URL outlives the account: the customer can still pay after an admin deleted it.
    expect((await gw.api('DELETE', `/api/user/${user.id}`)).status).toBe(200);
    const body = paid(session);
    // The credit used to throw inside the transaction: a 500 on every retry, nothing recorded, for days.
    const r = await postA(body);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ outcome: 'user_not_found', trade_no: tradeNo });
    expect((await eventRow('providerA', eventId(body))).outcome).toBe('user_not_found');
    expect((await postA(body)).body.data.outcome).toBe('duplicate');
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await credits(tradeNo))).toHaveLength(0);
    // An unpaid ending still closes it.
    expect((await postA(stripe.event('checkout.session.expired', session, { status: 'expired' }))).body.data.outcome).toBe('expired');
  });
});

describe('providerB (Creem scheme)', () => {
  async function orderB(amount = 500) {
    const u = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerB' }, u.token);
    expect(r.status).toBe(200);
    return { user: u, tradeNo: r.body.data.trade_no as string, checkout: creem.checkoutFor(r.body.data.trade_no) };
  }

  test('checkout.completed credits once; replay is a duplicate', async () => {
    const { user, tradeNo, checkout } = await orderB(800);
    const body = creem.completedEvent(checkout);
    const r = await postB(body);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ outcome: 'credited', trade_no: tradeNo });
    expect(await balance(user.id)).toBe(8000);
    expect((await order(tradeNo)).status).toBe('paid');
    expect((await postB(body)).body.data.outcome).toBe('duplicate');
    expect((await credits(tradeNo))).toHaveLength(1);
    expect(await balance(user.id)).toBe(8000);
    await balanced(user.id);
  });

  test('20 concurrent deliveries credit once', async () => {
    const { user, tradeNo, checkout } = await orderB(300);
    const body = creem.completedEvent(checkout);
    const results = await Promise.all(Array.from({ length: 20 }, () => postB(body)));
    expect(results.filter((r) => r.body.data.outcome === 'credited')).toHaveLength(1);
    expect(results.filter((r) => r.body.data.outcome === 'duplicate')).toHaveLength(19);
    expect((await credits(tradeNo))).toHaveLength(1);
    expect(await balance(user.id)).toBe(3000);
    await balanced(user.id);
  });

  test('missing, wrong and tampered signatures are 400 and change nothing', async () => {
    const { user, tradeNo, checkout } = await orderB(200);
    const body = creem.completedEvent(checkout);
    const tampered = body.replace('"amount":200', '"amount":20000');
    expect(tampered).not.toBe(body);
    for (const [b, sig, code] of [
      [body, null, 'missing_signature'], [body, 'nothex', 'invalid_signature'], [body, creemSign(body, 'other'), 'invalid_signature'],
      [tampered, creemSign(body), 'invalid_signature'], [body, creemSign(body).slice(0, 63), 'invalid_signature'], ['', creemSign(''), 'missing_body'],
    ] as Array<[string, string | null, string]>) {
      const r = await postB(b, sig);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe(code);
    }
    expect((await order(tradeNo)).status).toBe('pending');
    expect((await eventRow('providerB', eventId(body)))).toBeNull();
    expect(await balance(user.id)).toBe(0);
    // Upper-case hex of the right digest is the same signature.
    expect((await postB(body, creemSign(body).toUpperCase())).body.data.outcome).toBe('credited');
    await balanced(user.id);
  });

  test('wrong amount, currency or product is not credited', async () => {
    const { user, tradeNo, checkout } = await orderB(400);
    expect((await postB(creem.completedEvent(checkout, { amount: 300 }))).body.data.outcome).toBe('mismatch:amount 300 != 400');
    expect((await postB(creem.completedEvent(checkout, { currency: 'EUR' }))).body.data.outcome).toBe('mismatch:currency eur != usd');
    expect((await postB(creem.completedEvent(checkout, { product: 'prod_other' }))).body.data.outcome).toBe('mismatch:product prod_other');
    expect((await postB(creem.completedEvent(checkout, { status: 'pending' }))).body.data.outcome).toBe('noop:order status pending');
    expect((await order(tradeNo)).status).toBe('pending');
    expect(await balance(user.id)).toBe(0);
    // Creem's uppercase currency matches the configured lowercase one.
    expect((await postB(creem.completedEvent(checkout))).body.data.outcome).toBe('credited');
    await balanced(user.id);
  });

  test('a discounted or underpaid order (discount code at Creem\'s checkout) is not credited; tax on top is', async () => {
    const { user, tradeNo, checkout } = await orderB(400);
    // The order's `amount` still states the product total: only its discount and paid fields show the shortfall.
    const free = { discount: 'dis_1', sub_total: 400, discount_amount: 400, tax_amount: 0, amount_due: 0, amount_paid: 0 };
    expect((await postB(creem.completedEvent(checkout, free))).body.data).toEqual({ outcome: 'mismatch:discount 400', trade_no: tradeNo });
    expect((await postB(creem.completedEvent(checkout, { sub_total: 400, amount_paid: 399 }))).body.data.outcome).toBe('mismatch:amount_paid 399 < 400');
    for (const bad of [{ amount_paid: '400' }, { amount_paid: 1.5 }, { discount_amount: -1 }, { amount_paid: 2 ** 53 + 1 }]) {
      const r = await postB(creem.completedEvent(checkout, bad));
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_payload');
    }
    expect((await order(tradeNo)).status).toBe('pending');
    expect(await balance(user.id)).toBe(0);
    await balanced(user.id);
    // Paid in full, with a tax charged on top (tax-exclusive pricing), or with no discount: credited once.
    const full = { sub_total: 400, discount_amount: 0, tax_amount: 84, amount_due: 484, amount_paid: 484 };
    expect((await postB(creem.completedEvent(checkout, full))).body.data.outcome).toBe('credited');
    expect(await balance(user.id)).toBe(4000);
    await balanced(user.id);
  });

  test('unknown event kinds answer 200 and change nothing', async () => {
    const body = JSON.stringify({ id: 'evt_sub_1', eventType: 'subscription.paid', created_at: Date.now(), object: { id: 'sub_1' } });
    const r = await postB(body);
    expect(r.status).toBe(200);
    expect(r.body.data.outcome).toBe('ignored');
    expect((await eventRow('providerB', 'evt_sub_1'))).toBeNull();
  });

  test('an event for a providerA order is not credited by providerB', async () => {
    const { user, tradeNo } = await orderA(100);
    const fake = creem.completedEvent({ id: 'ch_x', object: 'checkout', product: 'prod_credits', units: 1, request_id: tradeNo, status: 'completed', checkout_url: '', success_url: null, mode: 'test', metadata: null });
    expect((await postB(fake)).body.data.outcome).toBe('unknown_order');
    expect(await balance(user.id)).toBe(0);
  });
});

describe('webhooks of a provider that is not configured', () => {
  test('answer 400 provider_not_configured', async () => {
    const bare = await startGateway();
    try {
      const body = JSON.stringify({ id: 'evt_1', type: 'checkout.session.completed' });
      const res = await fetch(`${bare.url}/api/providerA/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': await sign(body) }, body });
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.code).toBe('provider_not_configured');
    } finally {
      await bare.stop();
    }
  });
});
