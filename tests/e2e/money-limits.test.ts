/**
 * Balances never leave the exactly-representable range (README: Metering invariants, MAX_BALANCE). Each single
 * credit is capped at 10¹⁵, but before this nothing bounded the result: ten adjustments of 10¹⁵ took a balance to
 * 10¹⁶ > 2^53, where a charge of 1 unit vanished and the balance stopped being Σ ledger. Over real HTTP, both
 * backends: admin adjustments (one by one, in parallel, and debits with allow_negative), redemption codes, a paid
 * top-up's webhook, an operator's dispute reinstatement; every refusal changes nothing. Counters that only grow
 * (used_quota, request_count) stop at 2^53 − 1 instead of passing it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import Stripe from 'stripe';
import { MAX_BALANCE } from '@gw/core';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startStripeDouble, type StripeDouble } from '../doubles/stripe-api';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

const A_SECRET = 'whsec_test_money_limits';
const sdk = new Stripe('sk_test_x');
const E15 = 1_000_000_000_000_000;

let gw: TestGateway;
let stripe: StripeDouble;
let ant: Scripted;
const MODEL = 'limit-model';

beforeAll(async () => {
  stripe = startStripeDouble({ secretKey: 'sk_test_gw' });
  gw = await startGateway({
    PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gw', PROVIDER_A_WEBHOOK_SECRET: A_SECRET,
    // A top-up of 1,000,000 cents credits 10¹⁵: the largest credit a single adjustment may make.
    TOPUP_MAX: '1000000', QUOTA_PER_UNIT: '1000000000',
  });
  ant = upstream('anthropic', { text: 'ok', usage: { input: 1, output: 50 } });
  await addChannel(gw, { type: 'anthropic', url: ant.url, models: [MODEL] });
  await setPrice(gw, MODEL, { input: 0, output: 1_000_000 });
});
afterAll(async () => {
  await gw.stop();
  await stripe.stop();
  await ant.stop();
});

const adjust = (userId: number, amount: number, extra: Record<string, unknown> = {}) =>
  gw.api('POST', '/api/ledger/adjust', { user_id: userId, amount, note: 'limit test', ...extra });
/** Credits `total` in adjustments of at most 10¹⁵ (the largest one adjustment may make). */
async function fund(userId: number, total: number) {
  for (let left = total; left > 0; left -= E15) expect((await adjust(userId, Math.min(left, E15))).status).toBe(200);
}
const balance = async (userId: number) => (await gw.services.users.byId(userId))!.quota;
async function balanced(userId: number) {
  // Compared in SQL as well as through the JS readers: a value past 2^53 can read back equal after rounding.
  const row = await gw.db.get('select cast(quota as text) as q, (select cast(coalesce(sum(amount), 0) as text) from ledger where user_id = users.id) as s from users where id = ?', userId) as { q: string; s: string };
  expect(row.q).toBe(row.s);
  expect(BigInt(row.q) <= BigInt(MAX_BALANCE)).toBe(true);
  expect(await balance(userId)).toBe(await gw.services.ledger.sum(userId));
}
const ledgerCount = async (userId: number) => ((await gw.db.get('select count(*) as n from ledger where user_id = ?', userId)) as { n: number | string }).n;

describe('MAX_BALANCE', () => {
  test('admin credits stop at MAX_BALANCE: the one that would pass it is 409 balance_limit and writes nothing', async () => {
    const u = await makeUser(gw);
    for (let i = 1; i <= MAX_BALANCE / E15; i++) {
      const r = await adjust(u.id, E15);
      expect(r.status).toBe(200);
      expect(r.body.data.balance).toBe(i * E15);
    }
    const over = await adjust(u.id, 1);
    expect(over.status).toBe(409);
    expect(over.body.error).toMatchObject({ type: 'conflict_error', code: 'balance_limit', param: 'amount' });
    expect(over.body.error.message).toContain(String(MAX_BALANCE));
    expect(await balance(u.id)).toBe(MAX_BALANCE);
    expect(Number(await ledgerCount(u.id))).toBe(MAX_BALANCE / E15);
    // A debit is still fine, and a credit up to the bound again.
    expect((await adjust(u.id, -5)).body.data.balance).toBe(MAX_BALANCE - 5);
    expect((await adjust(u.id, 6)).status).toBe(409);
    expect((await adjust(u.id, 5)).body.data.balance).toBe(MAX_BALANCE);
    await balanced(u.id);
  });

  test('parallel credits cannot pass the bound together (checked with the write, under the row lock)', async () => {
    const u = await makeUser(gw);
    await fund(u.id, MAX_BALANCE - E15);
    const rs = await Promise.all(Array.from({ length: 10 }, () => adjust(u.id, E15 / 4)));
    expect(rs.filter((r) => r.status === 200)).toHaveLength(4);
    expect(rs.filter((r) => r.status === 409 && r.body.error.code === 'balance_limit')).toHaveLength(6);
    expect(await balance(u.id)).toBe(MAX_BALANCE);
    await balanced(u.id);
  });

  test('an admin debit with allow_negative stops at −MAX_BALANCE', async () => {
    const u = await makeUser(gw);
    for (let i = 1; i <= MAX_BALANCE / E15; i++) expect((await adjust(u.id, -E15, { allow_negative: true })).status).toBe(200);
    const under = await adjust(u.id, -1, { allow_negative: true });
    expect(under.status).toBe(409);
    expect(under.body.error).toMatchObject({ code: 'balance_limit', param: 'amount' });
    expect(await balance(u.id)).toBe(-MAX_BALANCE);
    await balanced(u.id);
  });

  test('a redemption code that would pass the bound is 409 balance_limit and stays unused', async () => {
    const u = await makeUser(gw);
    await fund(u.id, MAX_BALANCE - 10);
    const minted = await gw.api('POST', '/api/redemption/', { batch: `lim-${crypto.randomUUID().slice(0, 6)}`, count: 1, quota: 11, expires_at: Math.floor(Date.now() / 1000) + 3600 });
    const code = minted.body.data.codes[0] as string;
    const r = await gw.api('POST', '/api/user/redeem', { code }, u.token);
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('balance_limit');
    expect(await balance(u.id)).toBe(MAX_BALANCE - 10);
    await adjust(u.id, -1);
    const again = await gw.api('POST', '/api/user/redeem', { code }, u.token);
    expect(again.status).toBe(200);
    expect(again.body.data).toEqual({ quota: 11, balance: MAX_BALANCE });
    await balanced(u.id);
  });
});

describe('MAX_BALANCE and payments', () => {
  const postA = async (body: string) => {
    const sig = await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET });
    const res = await fetch(`${gw.url}/api/providerA/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': sig }, body });
    return { status: res.status, body: await res.json() as any };
  };

  test('a paid top-up that would pass the bound is not lost: recorded balance_limit, order pending, 409 so the provider retries; a retry after spending credits it', async () => {
    const u = await makeUser(gw);
    await fund(u.id, MAX_BALANCE - E15 + 1);
    const o = await gw.api('POST', '/api/topup/', { amount: 1_000_000, provider: 'providerA' }, u.token);
    expect(o.status).toBe(200);
    const tradeNo = o.body.data.trade_no as string;
    expect(o.body.data.credit).toBe(E15);
    const body = stripe.event('checkout.session.completed', stripe.sessionFor(tradeNo), { status: 'complete', payment_status: 'paid' });
    const eventId = JSON.parse(body).id as string;
    const first = await postA(body);
    expect(first.status).toBe(409);
    expect(first.body.error.code).toBe('balance_limit');
    expect(await balance(u.id)).toBe(MAX_BALANCE - E15 + 1);
    expect(((await gw.db.get('select status from topup_orders where trade_no = ?', tradeNo)) as any).status).toBe('pending');
    expect(((await gw.db.get('select outcome from webhook_events where provider = ? and event_id = ?', 'providerA', eventId)) as any).outcome).toBe('balance_limit');
    expect(gw.logs.some((l) => l.includes('topup.balance_limit') && l.includes(tradeNo))).toBe(true);
    // The provider's retry of the same event, still over: the same answer, nothing credited.
    expect((await postA(body)).status).toBe(409);
    // The user spends one unit (here a debit); the next retry is claimed again and credits the order.
    await adjust(u.id, -1);
    const retry = await postA(body);
    expect(retry.status).toBe(200);
    expect(retry.body.data.outcome).toBe('credited');
    expect(await balance(u.id)).toBe(MAX_BALANCE);
    expect(((await gw.db.get('select status from topup_orders where trade_no = ?', tradeNo)) as any).status).toBe('paid');
    expect((await postA(body)).body.data.outcome).toBe('duplicate');
    await balanced(u.id);
  });

  test('a payment held at balance_limit that the operator refunds: the refund (its Charge carries no trade no) is recorded against the pending order, and the retry\'s credit is taken straight back', async () => {
    const u = await makeUser(gw);
    await fund(u.id, MAX_BALANCE - E15 + 1);
    const o = await gw.api('POST', '/api/topup/', { amount: 1_000_000, provider: 'providerA' }, u.token);
    const tradeNo = o.body.data.trade_no as string;
    const session = stripe.sessionFor(tradeNo);
    const paid = stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' });
    expect((await postA(paid)).status).toBe(409);
    // The operator refunds the customer in Stripe's dashboard, as the balance_limit line suggests.
    const refund = await postA(stripe.refundEvent(session, [1_000_000]));
    expect([refund.status, refund.body.data?.outcome]).toEqual([200, 'not_paid:pending']);
    // The user spends; Stripe's retry of the payment event then credits, and the refunded credit is taken straight back.
    await adjust(u.id, -1);
    expect((await postA(paid)).body.data.outcome).toBe('credited');
    expect(await balance(u.id)).toBe(MAX_BALANCE - E15);
    expect(await gw.db.all("select kind, cast(amount as text) as amount from ledger where ref like ? and kind = 'clawback'", `${tradeNo}:%`)).toEqual([{ kind: 'clawback', amount: String(-E15) }]);
    await balanced(u.id);
  });

  test('a won dispute whose reinstatement would pass the bound is 409 balance_limit and changes nothing; once there is room it goes through', async () => {
    const u = await makeUser(gw);
    const o = await gw.api('POST', '/api/topup/', { amount: 1_000_000, provider: 'providerA' }, u.token);
    const tradeNo = o.body.data.trade_no as string;
    const session = stripe.sessionFor(tradeNo);
    expect((await postA(stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' }))).body.data.outcome).toBe('credited');
    expect((await postA(stripe.disputeEvent('charge.dispute.funds_withdrawn', session, 1_000_000, 'dp_lim'))).body.data.outcome).toBe('dispute_withdrawn');
    expect(await balance(u.id)).toBe(0);
    await fund(u.id, MAX_BALANCE - E15 + 1);
    const won = stripe.disputeEvent('charge.dispute.funds_reinstated', session, 1_000_000, 'dp_lim', 'won');
    const r = await postA(won);
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('balance_limit');
    const op = await gw.api('POST', `/api/topup/${tradeNo}/reinstate`, {});
    expect(op.status).toBe(409);
    expect(op.body.error.code).toBe('balance_limit');
    expect(await balance(u.id)).toBe(MAX_BALANCE - E15 + 1);
    await adjust(u.id, -1);
    // The provider retries the event (nothing was claimed): now it reinstates.
    const retry = await postA(won);
    expect(retry.status).toBe(200);
    expect(retry.body.data.outcome).toBe('dispute_reinstated');
    expect(await balance(u.id)).toBe(MAX_BALANCE);
    await balanced(u.id);
  });
});

describe('counters', () => {
  test('used_quota and request_count of a user and its key stop at 2^53 − 1 (a value written near it by hand or an old version)', async () => {
    const u = await keyedUser(gw, 1_000_000);
    const near = Number.MAX_SAFE_INTEGER - 10;
    await gw.db.all('update users set used_quota = ?, request_count = ? where id = ?', near, Number.MAX_SAFE_INTEGER - 1, u.id);
    await gw.db.all('update api_keys set used_quota = ? where id = ?', near, u.keyId);
    for (let i = 0; i < 2; i++) expect((await send(gw, u.key, msg(MODEL))).status).toBe(200);
    const user = await gw.db.get('select cast(used_quota as text) as used, cast(request_count as text) as n, cast(quota as text) as q from users where id = ?', u.id) as any;
    expect(user).toEqual({ used: String(Number.MAX_SAFE_INTEGER), n: String(Number.MAX_SAFE_INTEGER), q: String(1_000_000 - 100) });
    const key = await gw.db.get('select cast(used_quota as text) as used from api_keys where id = ?', u.keyId) as any;
    expect(key.used).toBe(String(Number.MAX_SAFE_INTEGER));
    const self = await gw.api('GET', '/api/user/self', undefined, u.token);
    expect(self.body.data.used_quota).toBe(Number.MAX_SAFE_INTEGER);
    await balanced(u.id);
  });
});

describe('a value past 2^53 already in the database', () => {
  /** Sends until `want` answers (a cluster's other nodes hear the change through the change feed, a moment later). */
  async function sendUntil(key: string, want: number) {
    let r = await send(gw, key, msg(MODEL));
    for (let i = 0; i < 50 && r.status !== want; i++) {
      await Bun.sleep(100);
      r = await send(gw, key, msg(MODEL));
    }
    return r;
  }
  // Literal digits: a JS number past 2^53 would be rounded before it reached the database.
  const INEXACT = '9007199254740993';

  test('a balance written past 2^53 by hand: logged naming the user, every request 402 balance_inexact, nothing charged; usable again once corrected', async () => {
    const u = await keyedUser(gw, 1_000_000);
    expect((await send(gw, u.key, msg(MODEL))).status).toBe(200);
    await gw.db.all(`update users set quota = ${INEXACT} where id = ${u.id}`);
    // Any change to the user makes every node re-read its balance (here its display name).
    expect((await gw.api('PUT', '/api/user/', { id: u.id, display_name: 'hand-edited' })).status).toBe(200);
    const r = await sendUntil(u.key, 402);
    expect(r.status).toBe(402);
    expect(r.body.error).toMatchObject({ type: 'billing_error', code: 'balance_inexact' });
    expect(r.body.error.message).toContain('2^53');
    expect(gw.logs.some((l) => l.includes('balance.inexact') && l.includes(`userId=${u.id}`))).toBe(true);
    const hits = ant.hits;
    expect((await send(gw, u.key, msg(MODEL))).body.error?.code).toBe('balance_inexact');
    expect(ant.hits).toBe(hits);
    const row = await gw.db.get('select cast(quota as text) as q from users where id = ?', u.id) as any;
    expect(row.q).toBe(INEXACT);
    // Management reads answer, and say which field they cannot show exactly.
    const view = await gw.api('GET', `/api/user/${u.id}`);
    expect(view.status).toBe(200);
    expect(view.body.data.inexact).toEqual(['quota']);
    await gw.db.all(`update users set quota = 500000 where id = ${u.id}`);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, display_name: 'corrected' })).status).toBe(200);
    expect((await sendUntil(u.key, 200)).status).toBe(200);
    expect('inexact' in (await gw.api('GET', `/api/user/${u.id}`)).body.data).toBe(false);
  });

  test("a limited key's remain_quota written past 2^53: that key is refused with 402 balance_inexact, the owner's other keys still work", async () => {
    const u = await keyedUser(gw, 1_000_000, { unlimited_quota: false, remain_quota: 500_000 });
    const other = await gw.api('POST', '/api/token/', { name: 'k2' }, u.token);
    expect((await send(gw, u.key, msg(MODEL))).status).toBe(200);
    await gw.db.all(`update api_keys set remain_quota = ${INEXACT} where id = ${u.keyId}`);
    expect((await gw.api('PUT', '/api/token/', { id: u.keyId, name: 'hand-edited' }, u.token)).status).toBe(200);
    const r = await sendUntil(u.key, 402);
    expect(r.status).toBe(402);
    expect(r.body.error).toMatchObject({ type: 'billing_error', code: 'balance_inexact' });
    expect(r.body.error.message).toContain('remain_quota');
    expect(gw.logs.some((l) => l.includes('balance.inexact') && l.includes(`keyId=${u.keyId}`))).toBe(true);
    expect((await send(gw, other.body.data.key, msg(MODEL))).status).toBe(200);
    const view = await gw.api('GET', `/api/token/${u.keyId}`, undefined, u.token);
    expect(view.status).toBe(200);
    expect(view.body.data.inexact).toEqual(['remain_quota']);
    expect('inexact' in (await gw.api('GET', `/api/token/${other.body.data.id}`, undefined, u.token)).body.data).toBe(false);
  });
});
