/** Top-up orders end to end: the gateway against local doubles of both providers' checkout APIs. */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { startStripeDouble, type StripeDouble } from '../doubles/stripe-api';
import { startCreemDouble, type CreemDouble } from '../doubles/creem-api';

let gw: TestGateway;
let stripe: StripeDouble;
let creem: CreemDouble;

beforeAll(async () => {
  stripe = startStripeDouble({ secretKey: 'sk_test_gateway' });
  creem = startCreemDouble({ apiKey: 'creem_test_key', products: { prod_credits: 100 } });
  gw = await startGateway({
    PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gateway', PROVIDER_A_WEBHOOK_SECRET: 'whsec_a',
    PROVIDER_B_API_BASE: creem.url, PROVIDER_B_API_KEY: 'creem_test_key', PROVIDER_B_WEBHOOK_SECRET: 'creem_whsec',
    PROVIDER_B_PRODUCT_ID: 'prod_credits', PROVIDER_B_UNIT_AMOUNT: '100',
    TOPUP_MIN: '100', TOPUP_MAX: '50000', QUOTA_PER_UNIT: '1000', PUBLIC_URL: 'https://gw.example.com',
    PAYMENT_API_TIMEOUT_MS: '300',
  });
});
afterAll(async () => {
  await gw.stop();
  await stripe.stop();
  await creem.stop();
});

const balanced = async (userId: number) => expect((await gw.services.users.byId(userId))!.quota).toBe(await gw.services.ledger.sum(userId));

describe('POST /api/topup/ with providerA (Stripe-compatible)', () => {
  test('records a pending order and answers the Checkout Session URL', async () => {
    const u = await makeUser(gw);
    const before = stripe.requests.length;
    const r = await gw.api('POST', '/api/topup/', { amount: 1234, provider: 'providerA' }, u.token);
    expect(r.status).toBe(200);
    const d = r.body.data;
    expect(d).toMatchObject({ amount: 1234, currency: 'usd', credit: 1234 * 1000, status: 'pending' });
    expect(d.trade_no).toMatch(/^tp_[0-9A-Za-z]{24}$/);
    expect(stripe.requests.length).toBe(before + 1);
    const req = stripe.requests.at(-1)!;
    expect(req.path).toBe('/v1/checkout/sessions');
    expect(req.headers.authorization).toBe('Bearer sk_test_gateway');
    expect(req.headers['content-type']).toContain('application/x-www-form-urlencoded');
    expect(req.headers['idempotency-key']).toBe(d.trade_no);
    expect(req.form).toMatchObject({
      mode: 'payment', client_reference_id: d.trade_no,
      'line_items[0][quantity]': '1', 'line_items[0][price_data][unit_amount]': '1234', 'line_items[0][price_data][currency]': 'usd',
      'metadata[trade_no]': d.trade_no, 'metadata[user_id]': String(u.id),
    });
    expect(req.form.success_url).toBe(`https://gw.example.com/topup/success?trade_no=${d.trade_no}`);
    expect(req.form.cancel_url).toBe(`https://gw.example.com/topup/cancel?trade_no=${d.trade_no}`);
    const session = stripe.sessionFor(d.trade_no);
    expect(d.checkout_url).toBe(session.url);
    // Stored with the provider's reference; nothing credited yet.
    const got = await gw.api('GET', `/api/topup/${d.trade_no}`, undefined, u.token);
    expect(got.body.data).toMatchObject({ trade_no: d.trade_no, user_id: u.id, provider: 'providerA', provider_ref: session.id, status: 'pending', paid_at: null });
    expect((await gw.services.users.byId(u.id))!.quota).toBe(0);
    await balanced(u.id);
  });

  test('amount outside TOPUP_MIN..TOPUP_MAX, non-integer or string amounts are 400 and call no provider', async () => {
    const u = await makeUser(gw);
    const before = stripe.requests.length;
    for (const amount of [99, 50001, 0, -5]) {
      const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerA' }, u.token);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'out_of_range', param: 'amount' });
    }
    for (const amount of [12.5, '500']) {
      const r = await gw.api('POST', '/api/topup/', { amount, provider: 'providerA' }, u.token);
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe('amount');
    }
    expect((await gw.api('POST', '/api/topup/', { amount: 500, provider: 'paypal' }, u.token)).body.error.code).toBe('invalid_provider');
    expect(stripe.requests.length).toBe(before);
    expect((await gw.api('GET', '/api/topup/self', undefined, u.token)).body.data.total).toBe(0);
  });

  test('anonymous callers get 401', async () => {
    const r = await gw.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, null);
    expect(r.status).toBe(401);
  });

  test('provider API failure: 502, order marked failed, nothing credited', async () => {
    const u = await makeUser(gw);
    for (const fail of [{ status: 500 }, { status: 401, code: 'api_key_invalid' }, 'no-url', 'hang'] as const) {
      stripe.fail = fail;
      const r = await gw.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, u.token);
      expect(r.status).toBe(502);
      expect(r.body.error).toMatchObject({ type: 'api_error', code: 'provider_error' });
      expect(r.body.error.message).not.toContain('sk_test_gateway');
    }
    stripe.fail = null;
    const mine = await gw.api('GET', '/api/topup/self', undefined, u.token);
    expect(mine.body.data.total).toBe(4);
    expect(mine.body.data.items.map((o: any) => o.status)).toEqual(['failed', 'failed', 'failed', 'failed']);
    expect((await gw.services.users.byId(u.id))!.quota).toBe(0);
    await balanced(u.id);
  });
});

describe('POST /api/topup/ with providerB (Creem-compatible)', () => {
  test('asks for units of the configured product with request_id = trade no', async () => {
    const u = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount: 2500, provider: 'providerB' }, u.token);
    expect(r.status).toBe(200);
    const d = r.body.data;
    const req = creem.requests.at(-1)!;
    expect(req.path).toBe('/v1/checkouts');
    expect(req.headers['x-api-key']).toBe('creem_test_key');
    expect(req.body).toMatchObject({ product_id: 'prod_credits', request_id: d.trade_no, units: 25, metadata: { trade_no: d.trade_no, user_id: String(u.id) } });
    expect(req.body.success_url).toBe(`https://gw.example.com/topup/success?trade_no=${d.trade_no}`);
    const c = creem.checkoutFor(d.trade_no);
    expect(d.checkout_url).toBe(c.checkout_url);
    expect((await gw.api('GET', `/api/topup/${d.trade_no}`, undefined, u.token)).body.data.provider_ref).toBe(c.id);
  });

  test('an amount that is not a whole number of product units is 400', async () => {
    const u = await makeUser(gw);
    const r = await gw.api('POST', '/api/topup/', { amount: 250, provider: 'providerB' }, u.token);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'invalid_amount', param: 'amount' });
  });

  test('provider failure is 502 and the order is failed', async () => {
    const u = await makeUser(gw);
    creem.fail = { status: 503 };
    const r = await gw.api('POST', '/api/topup/', { amount: 300, provider: 'providerB' }, u.token);
    creem.fail = null;
    expect(r.status).toBe(502);
    const list = await gw.api('GET', '/api/topup/self', undefined, u.token);
    expect(list.body.data.items[0]).toMatchObject({ provider: 'providerB', status: 'failed', provider_ref: '', checkout_url: '' });
  });
});

describe('listing and reading orders', () => {
  test('users see only their own; admins see all with filters; a stranger reads 404', async () => {
    const a = await makeUser(gw);
    const b = await makeUser(gw);
    const admin = await makeUser(gw, 10);
    const ta = (await gw.api('POST', '/api/topup/', { amount: 100, provider: 'providerA' }, a.token)).body.data.trade_no;
    await gw.api('POST', '/api/topup/', { amount: 200, provider: 'providerB' }, a.token);
    const tb = (await gw.api('POST', '/api/topup/', { amount: 300, provider: 'providerA' }, b.token)).body.data.trade_no;
    const mine = await gw.api('GET', '/api/topup/self?page_size=1&p=2', undefined, a.token);
    expect(mine.body.data).toMatchObject({ total: 2, page: 2, page_size: 1 });
    expect(mine.body.data.items[0].trade_no).toBe(ta);
    expect((await gw.api('GET', `/api/topup/${tb}`, undefined, a.token)).status).toBe(404);
    expect((await gw.api('GET', `/api/topup/${tb}`, undefined, admin.token)).body.data.user_id).toBe(b.id);
    expect((await gw.api('GET', '/api/topup/', undefined, a.token)).status).toBe(403);
    const all = await gw.api('GET', `/api/topup/?user_id=${a.id}&provider=providerA&status=pending`, undefined, admin.token);
    expect(all.body.data.total).toBe(1);
    expect(all.body.data.items[0].trade_no).toBe(ta);
    expect((await gw.api('GET', `/api/topup/?user_id=${a.id}`, undefined, admin.token)).body.data.total).toBe(2);
    expect((await gw.api('GET', '/api/topup/?status=bogus', undefined, admin.token)).status).toBe(400);
  });

  test('GET /api/topup/info describes the configuration', async () => {
    const u = await makeUser(gw);
    const r = await gw.api('GET', '/api/topup/info', undefined, u.token);
    expect(r.body.data).toEqual({ currency: 'usd', min: 100, max: 50000, quota_per_unit: 1000, providers: ['providerA', 'providerB'] });
  });
});

describe('a gateway without providers', () => {
  test('refuses orders with provider_not_configured, and a half-configured provider stops start-up', async () => {
    const bare = await startGateway();
    try {
      const u = await makeUser(bare);
      for (const provider of ['providerA', 'providerB']) {
        const r = await bare.api('POST', '/api/topup/', { amount: 500, provider }, u.token);
        expect(r.status).toBe(400);
        expect(r.body.error).toMatchObject({ code: 'provider_not_configured', param: 'provider', type: 'invalid_request_error' });
      }
      expect((await bare.api('GET', '/api/topup/self', undefined, u.token)).body.data.total).toBe(0);
    } finally {
      await bare.stop();
    }
    await expect(startGateway({ PROVIDER_B_API_KEY: 'k', PROVIDER_B_WEBHOOK_SECRET: 's' })).rejects.toThrow('PROVIDER_B_PRODUCT_ID');
  });
});

describe('order creation limit', () => {
  test('TOPUP_MAX_ORDERS_PER_HOUR per user, parallel creations included; other users unaffected; a 429 calls no provider', async () => {
    const g = await startGateway({
      PROVIDER_A_API_BASE: stripe.url, PROVIDER_A_SECRET_KEY: 'sk_test_gateway', PROVIDER_A_WEBHOOK_SECRET: 'whsec_a',
      TOPUP_MIN: '100', TOPUP_MAX: '50000', TOPUP_MAX_ORDERS_PER_HOUR: '3',
    });
    try {
      const [u, v] = [await makeUser(g), await makeUser(g)];
      const before = stripe.requests.length;
      // The 8 creations in one window of the hour (clock-aligned in PostgreSQL mode).
      await clearOfWindowEdge(10_000, 3_600_000);
      const answers = await Promise.all(Array.from({ length: 8 }, () => g.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, u.token)));
      const statuses = answers.map((a) => a.status).sort();
      expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429, 429]);
      const refused = answers.find((a) => a.status === 429)!;
      expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'too_many_orders' });
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(stripe.requests.length).toBe(before + 3);
      expect((await g.api('GET', '/api/topup/self', undefined, u.token)).body.data.total).toBe(3);
      expect((await g.api('POST', '/api/topup/', { amount: 500, provider: 'providerA' }, v.token)).status).toBe(200);
    } finally {
      await g.stop();
    }
  }, 30_000);
});
