/**
 * A gateway with both payment providers configured against their doubles, and the helpers the refund and dispute
 * tests share: deliveries signed as the providers sign them (providerA with the official `stripe` package's
 * test-header helper, providerB with a computed HMAC), paid orders, and balance/ledger checks. QUOTA_PER_UNIT is 10:
 * an order of N cents credits 10 × N quota units.
 */
import { expect } from 'bun:test';
import { createHmac } from 'node:crypto';
import Stripe from 'stripe';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startStripeDouble, type StripeDouble, type StripeSession } from '../doubles/stripe-api';
import { startCreemDouble, type CreemDouble } from '../doubles/creem-api';

export const A_SECRET = 'whsec_test_payments_setup';
export const B_SECRET = 'creem_whsec_payments_setup';
const sdk = new Stripe('sk_test_x');

export interface PaymentsHarness {
  gw: TestGateway;
  stripe: StripeDouble;
  creem: CreemDouble;
  /** A signed delivery; `timestamp` signs providerA's header at that time instead of now. */
  deliver(provider: 'providerA' | 'providerB', body: string, timestamp?: number): Promise<{ status: number; json: any }>;
  /** A delivery that must answer 200; its `data`. */
  postA(body: string): Promise<{ outcome: string; trade_no: string | null }>;
  postB(body: string): Promise<{ outcome: string; trade_no: string | null }>;
  /** A new user with a pending order of `amount` cents. */
  orderA(amount: number): Promise<{ user: Awaited<ReturnType<typeof makeUser>>; tradeNo: string; session: StripeSession }>;
  orderB(amount: number): Promise<{ user: Awaited<ReturnType<typeof makeUser>>; tradeNo: string; checkout: ReturnType<CreemDouble['checkoutFor']> }>;
  balance(token: string): Promise<number>;
  orderView(tradeNo: string, token: string): Promise<any>;
  /** The order's clawback and reinstate entries, oldest first. */
  reversalsOf(tradeNo: string): Promise<any[]>;
  /** The order's topup_reversals rows, by key. */
  rowsOf(tradeNo: string): Promise<any[]>;
  eventRow(provider: string, body: string): Promise<any>;
  /** balance == Σ ledger, and never more taken back than credited. */
  balanced(userId: number, tradeNo?: string): Promise<void>;
  stop(): Promise<void>;
}

/** `env` is added to the gateway's settings (a restart test names its own database). */
export async function startPayments(env: Record<string, string> = {}): Promise<PaymentsHarness> {
  const stripe = startStripeDouble({ secretKey: 'sk_test_gw' });
  const creem = startCreemDouble({ apiKey: 'creem_key', products: { prod_credits: 100 } });
  const gw = await startGateway({
    PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gw', PROVIDER_A_WEBHOOK_SECRET: A_SECRET,
    PROVIDER_B_API_BASE: creem.url, PROVIDER_B_API_KEY: 'creem_key', PROVIDER_B_WEBHOOK_SECRET: B_SECRET, PROVIDER_B_PRODUCT_ID: 'prod_credits',
    QUOTA_PER_UNIT: '10', ...env,
  });
  const deliver = async (provider: 'providerA' | 'providerB', body: string, timestamp?: number) => {
    const h: Record<string, string> = provider === 'providerA'
      ? { 'stripe-signature': await sdk.webhooks.generateTestHeaderStringAsync({ payload: body, secret: A_SECRET, ...(timestamp ? { timestamp } : {}) }) }
      : { 'creem-signature': createHmac('sha256', B_SECRET).update(body).digest('hex') };
    const res = await fetch(`${gw.url}/api/${provider}/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', ...h }, body });
    return { status: res.status, json: await res.json() as any };
  };
  const post = async (provider: 'providerA' | 'providerB', body: string) => {
    const { status, json } = await deliver(provider, body);
    expect({ status, error: json.error }).toEqual({ status: 200, error: undefined });
    return json.data as { outcome: string; trade_no: string | null };
  };
  const h: PaymentsHarness = {
    gw, stripe, creem, deliver,
    postA: (b) => post('providerA', b),
    postB: (b) => post('providerB', b),
    async orderA(amount) {
      const user = await makeUser(gw);
      const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerA' }, user.token);
      expect(r.status).toBe(200);
      const tradeNo = r.body.data.trade_no as string;
      return { user, tradeNo, session: stripe.sessionFor(tradeNo) };
    },
    async orderB(amount) {
      const user = await makeUser(gw);
      const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerB' }, user.token);
      expect(r.status).toBe(200);
      const tradeNo = r.body.data.trade_no as string;
      return { user, tradeNo, checkout: creem.checkoutFor(tradeNo) };
    },
    balance: async (token) => (await gw.api('GET', '/api/user/self', undefined, token)).body.data.quota as number,
    orderView: async (tradeNo, token) => (await gw.api('GET', `/api/topup/${tradeNo}`, undefined, token)).body.data,
    reversalsOf: (tradeNo) => gw.db.all("select kind, amount, ref from ledger where kind in ('clawback', 'reinstate') and ref like ? order by id", `${tradeNo}:%`),
    rowsOf: (tradeNo) => gw.db.all('select key, state, amount, gross, as_of, since from topup_reversals where trade_no = ? order by key', tradeNo),
    eventRow: (provider, body) => gw.db.get('select * from webhook_events where provider = ? and event_id = ?', provider, JSON.parse(body).id),
    async balanced(userId, tradeNo) {
      expect((await gw.services.users.byId(userId))!.quota).toBe(await gw.services.ledger.sum(userId));
      if (!tradeNo) return;
      const order = (await gw.db.get('select credit, clawed_back from topup_orders where trade_no = ?', tradeNo)) as any;
      const taken = (await h.reversalsOf(tradeNo)).reduce((s: number, r: any) => s - Number(r.amount), 0);
      expect(taken).toBe(Number(order.clawed_back));
      expect(taken).toBeGreaterThanOrEqual(0);
      expect(taken).toBeLessThanOrEqual(Number(order.credit));
    },
    async stop() {
      await gw.stop();
      await stripe.stop();
      await creem.stop();
    },
  };
  return h;
}

/** The order's status as its owner reads it, once it is no longer `pending` (or `pending` after 20 s). */
export async function settledStatus(h: PaymentsHarness, tradeNo: string, token: string): Promise<string> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const status = (await h.orderView(tradeNo, token)).status as string;
    if (status !== 'pending' || Date.now() > deadline) return status;
    await Bun.sleep(200);
  }
}
