/**
 * One signed payment webhook delivered to all 3 nodes at once (providers retry, and a load balancer
 * spreads the retries) credits exactly once, for both signature schemes; the credit is spendable on
 * every node within 1 s. A refund delivered the same way takes the credit back once, and every node then
 * refuses the user (402) within 1 s.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { createHmac } from 'node:crypto';
import Stripe from 'stripe';
import { startAnthropicUpstream } from '../doubles/anthropic-upstream';
import { startCreemDouble } from '../doubles/creem-api';
import { startStripeDouble } from '../doubles/stripe-api';
import { startCluster, within, type Cluster } from '../helpers/cluster';
import { loginToken } from '../helpers/gateway-process';
import { requirePg } from '../helpers/postgres';
import { requireRedis } from '../helpers/redis';
import { addChannel, expectConsistent, fundedUser, money, msg, send, setPrice } from './fixtures';

const ready = (await requirePg('tests/cluster/webhooks.test.ts')) && (await requireRedis('tests/cluster/webhooks.test.ts'));
const A_SECRET = 'whsec_cluster_a';
const B_SECRET = 'creem_whsec_cluster';
const QUOTA_PER_UNIT = 10;
const MODEL = 'pay-model';
// Only the signing helper of the official package is used.
const sdk = new Stripe('sk_test_x');
const stripe = startStripeDouble({ secretKey: 'sk_test_gw' });
const creem = startCreemDouble({ apiKey: 'creem_key', products: { prod_credits: 100 } });
const upstream = startAnthropicUpstream({ maxRecorded: 0 });
upstream.script(() => ({ text: 'ok', usage: { input: 1, output: 10 } }));
let c: Cluster;

beforeAll(async () => {
  if (!ready) return;
  c = await startCluster({
    env: {
      PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gw', PROVIDER_A_WEBHOOK_SECRET: A_SECRET,
      PROVIDER_B_API_BASE: creem.url, PROVIDER_B_API_KEY: 'creem_key', PROVIDER_B_WEBHOOK_SECRET: B_SECRET, PROVIDER_B_PRODUCT_ID: 'prod_credits',
      QUOTA_PER_UNIT: String(QUOTA_PER_UNIT),
    },
  });
  await addChannel(c, upstream.url, [MODEL]);
  await setPrice(c, MODEL);
}, 60_000);
afterAll(async () => {
  await c?.stop();
  await stripe.stop();
  await creem.stop();
  await upstream.stop();
});

/** A user with no balance, a key, and a pending order of `amount` with `provider`, created on node A. */
async function order(provider: 'providerA' | 'providerB', amount: number) {
  const u = await fundedUser(c, 0);
  const [row] = await c.sql`select username from users where id = ${u.userId}`;
  const token = await loginToken(c.nodes[0]!.url, row!.username, 'cluster-user-pw-1');
  const r = await c.api(0, 'POST', '/api/topup/', { amount, provider }, token);
  expect(r.status).toBe(200);
  return { ...u, tradeNo: r.body.data.trade_no as string };
}

/** Sends `body` COPIES times to each node, all at once; returns the outcomes. */
async function deliverEverywhere(provider: 'providerA' | 'providerB', body: string, headers: () => Promise<Record<string, string>>) {
  const COPIES = 5;
  const posts = c.nodes.flatMap((n) => Array.from({ length: COPIES }, async () => {
    const res = await fetch(`${n.url}/api/${provider}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...(await headers()) }, body });
    expect(res.status).toBe(200);
    return ((await res.json()) as any).data.outcome as string;
  }));
  return (await Promise.all(posts)).sort();
}

async function expectCreditedOnce(u: { userId: number; key: string }, tradeNo: string, amount: number, outcomes: string[]) {
  expect(outcomes.filter((o) => o === 'credited')).toHaveLength(1);
  expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(outcomes.length - 1);
  const credits = await c.sql`select amount from ledger where kind = 'topup' and ref = ${tradeNo}`;
  expect(credits.map((r) => Number(r.amount))).toEqual([amount * QUOTA_PER_UNIT]);
  const [o] = await c.sql`select status from topup_orders where trade_no = ${tradeNo}`;
  expect(o!.status).toBe('paid');
  const m = await expectConsistent(c, u.userId);
  expect(m.balance).toBe(amount * QUOTA_PER_UNIT);
  // The credit reached every node's admission: each can serve a request paid from it within 1 s.
  for (const n of c.nodes) {
    await within(`credit spendable on node ${n.index}`, 1_000, async () => (await send(n.url, u.key, msg(MODEL))).status === 200);
  }
}

describe.skipIf(!ready)('one webhook at all nodes at once credits once', () => {
  test('providerA (Stripe scheme): 15 deliveries over 3 nodes, one credit', async () => {
    const amount = 500; // 5000 quota: 5 requests
    const u = await order('providerA', amount);
    const body = stripe.event('checkout.session.completed', stripe.sessionFor(u.tradeNo), { status: 'complete', payment_status: 'paid' });
    // Each delivery signed afresh, as Stripe's retries are.
    const outcomes = await deliverEverywhere('providerA', body, async () => ({ 'stripe-signature': await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET }) }));
    await expectCreditedOnce(u, u.tradeNo, amount, outcomes);
  }, 30_000);

  test('providerB (Creem scheme): 15 deliveries over 3 nodes, one credit', async () => {
    const amount = 400;
    const u = await order('providerB', amount);
    const body = creem.completedEvent(creem.checkoutFor(u.tradeNo));
    const sig = createHmac('sha256', B_SECRET).update(body).digest('hex');
    const outcomes = await deliverEverywhere('providerB', body, async () => ({ 'creem-signature': sig }));
    await expectCreditedOnce(u, u.tradeNo, amount, outcomes);
  }, 30_000);

  test('providerA refunds (a partial, then the full running total), each delivered 15 times over 3 nodes: taken back once, every node refuses', async () => {
    const amount = 500;
    const u = await order('providerA', amount);
    const session = stripe.sessionFor(u.tradeNo);
    const sign = (body: string) => async () => ({ 'stripe-signature': await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET }) });
    const paid = stripe.event('checkout.session.completed', session, { status: 'complete', payment_status: 'paid' });
    await expectCreditedOnce(u, u.tradeNo, amount, await deliverEverywhere('providerA', paid, sign(paid)));
    // Spend on node 1, so the full refund leaves the balance below zero.
    expect((await send(c.nodes[1]!.url, u.key, msg(MODEL))).status).toBe(200);
    const spent = amount * QUOTA_PER_UNIT - (await money(c, u.userId)).balance;
    expect(spent).toBeGreaterThan(0);
    for (const steps of [[200], [200, 500]]) {
      const body = stripe.refundEvent(session, steps);
      const outcomes = await deliverEverywhere('providerA', body, sign(body));
      expect(outcomes.filter((o) => o === 'refunded')).toHaveLength(1);
      expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(outcomes.length - 1);
    }
    const rows = await c.sql`select amount from ledger where kind = 'clawback' and ref like ${u.tradeNo + ':%'} order by id`;
    expect(rows.map((r) => Number(r.amount))).toEqual([-2000, -3000]);
    const m = await expectConsistent(c, u.userId);
    expect(m.balance).toBe(-spent);
    for (const n of c.nodes) {
      await within(`refund refused on node ${n.index}`, 1_000, async () => (await send(n.url, u.key, msg(MODEL))).status === 402);
    }
  }, 30_000);
});
