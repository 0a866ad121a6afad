import { describe, expect, test } from 'bun:test';
import { paymentsConfig } from './config';

describe('paymentsConfig', () => {
  test('defaults: usd, 100..1,000,000, 5000 quota per cent, no providers', () => {
    const c = paymentsConfig({});
    expect(c).toMatchObject({ currency: 'usd', min: 100, max: 1_000_000, quotaPerUnit: 5000, providerA: null, providerB: null, apiTimeoutMs: 15_000 });
    expect(c.successUrl).toBe('http://localhost:3000/topup/success');
    expect(paymentsConfig({ PUBLIC_URL: 'https://gw.example.com/', TOPUP_CANCEL_URL: 'https://shop.example.com/back' })).toMatchObject({
      successUrl: 'https://gw.example.com/topup/success', cancelUrl: 'https://shop.example.com/back',
    });
  });

  test('a provider is on when all its variables are set, with default API bases', () => {
    const c = paymentsConfig({
      PROVIDER_A_SECRET_KEY: 'sk', PROVIDER_A_WEBHOOK_SECRET: 'whsec',
      PROVIDER_B_API_KEY: 'k', PROVIDER_B_WEBHOOK_SECRET: 's', PROVIDER_B_PRODUCT_ID: 'prod', TOPUP_CURRENCY: 'EUR',
    });
    expect(c.currency).toBe('eur');
    expect(c.providerA).toEqual({ apiBase: 'https://api.stripe.com', secretKey: 'sk', webhookSecret: 'whsec', toleranceSeconds: 300 });
    expect(c.providerB).toEqual({ apiBase: 'https://api.creem.io', apiKey: 'k', webhookSecret: 's', productId: 'prod', unitAmount: 100 });
  });

  test('bad values stop start-up with one line naming the variable', () => {
    expect(() => paymentsConfig({ PROVIDER_A_SECRET_KEY: 'sk' })).toThrow('PROVIDER_A_WEBHOOK_SECRET must be set too');
    expect(() => paymentsConfig({ TOPUP_MIN: '500', TOPUP_MAX: '100' })).toThrow('TOPUP_MIN (500) must not exceed TOPUP_MAX (100)');
    expect(() => paymentsConfig({ QUOTA_PER_UNIT: '1.5' })).toThrow('QUOTA_PER_UNIT must be an integer');
    expect(() => paymentsConfig({ TOPUP_CURRENCY: 'dollars' })).toThrow('TOPUP_CURRENCY');
    expect(() => paymentsConfig({ PUBLIC_URL: 'not a url' })).toThrow('PUBLIC_URL');
    expect(() => paymentsConfig({ TOPUP_MAX: '9007199254740991', QUOTA_PER_UNIT: '10' })).toThrow('MAX_BALANCE');
    // The largest top-up must fit in an empty balance (4e15 = MAX_BALANCE exactly passes, one unit more does not).
    expect(paymentsConfig({ TOPUP_MAX: '4000000', QUOTA_PER_UNIT: '1000000000' }).max).toBe(4_000_000);
    expect(() => paymentsConfig({ TOPUP_MAX: '4000001', QUOTA_PER_UNIT: '1000000000' })).toThrow('MAX_BALANCE');
    expect(() => paymentsConfig({ REDEEM_MAX_FAILURES: '0' })).toThrow('REDEEM_MAX_FAILURES');
    expect(() => paymentsConfig({ REDEEM_FAILURE_WINDOW_SECONDS: 'ten' })).toThrow('REDEEM_FAILURE_WINDOW_SECONDS');
    // A create in flight (bounded by the provider timeout) must never have its order failed by the sweep.
    expect(() => paymentsConfig({ TOPUP_CHECKOUT_DEADLINE_SECONDS: '15' })).toThrow('must exceed PAYMENT_API_TIMEOUT_MS (15000 ms)');
    expect(paymentsConfig({ TOPUP_CHECKOUT_DEADLINE_SECONDS: '16' }).checkoutDeadlineSeconds).toBe(16);
    expect(paymentsConfig({}).checkoutDeadlineSeconds).toBe(300);
    // An order with a checkout gets a day unless set, and never less time than one without.
    expect(paymentsConfig({}).pendingExpirySeconds).toBe(86_400);
    expect(paymentsConfig({ TOPUP_PENDING_EXPIRY_SECONDS: '600' }).pendingExpirySeconds).toBe(600);
    expect(() => paymentsConfig({ TOPUP_PENDING_EXPIRY_SECONDS: '299' })).toThrow('must be at least TOPUP_CHECKOUT_DEADLINE_SECONDS (300)');
  });

  test('redemption attempt limit: 10 failures per 600 s unless set', () => {
    expect(paymentsConfig({})).toMatchObject({ redeemMaxFailures: 10, redeemFailureWindowSeconds: 600 });
    expect(paymentsConfig({ REDEEM_MAX_FAILURES: '3', REDEEM_FAILURE_WINDOW_SECONDS: '60' })).toMatchObject({ redeemMaxFailures: 3, redeemFailureWindowSeconds: 60 });
  });
});
