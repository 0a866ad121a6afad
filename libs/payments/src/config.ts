/**
 * Top-up settings, read once at start-up: a bad or half-configured provider stops the process with
 * one line instead of failing when the first customer pays.
 */
import { ConfigError, readIntEnv } from '@gw/config';
import { MAX_BALANCE } from '@gw/core';

/** providerA: a Stripe-compatible API (Checkout Sessions, `Stripe-Signature` webhooks). */
export interface ProviderAConfig {
  /** PROVIDER_A_API_BASE, origin without /v1 (default https://api.stripe.com). */
  apiBase: string;
  /** PROVIDER_A_SECRET_KEY: Bearer key for the API. */
  secretKey: string;
  /** PROVIDER_A_WEBHOOK_SECRET: the endpoint's signing secret (`whsec_…`), used as-is as HMAC key. */
  webhookSecret: string;
  /** PROVIDER_A_WEBHOOK_TOLERANCE (default 300): seconds a signed timestamp stays valid. */
  toleranceSeconds: number;
}

/** providerB: a Creem-compatible API (`POST /v1/checkouts`, `creem-signature` webhooks). */
export interface ProviderBConfig {
  /** PROVIDER_B_API_BASE (default https://api.creem.io; test mode is https://test-api.creem.io). */
  apiBase: string;
  /** PROVIDER_B_API_KEY: sent as `x-api-key`. */
  apiKey: string;
  /** PROVIDER_B_WEBHOOK_SECRET: HMAC key of `creem-signature`. */
  webhookSecret: string;
  /** PROVIDER_B_PRODUCT_ID: a one-time product whose price is PROVIDER_B_UNIT_AMOUNT. */
  productId: string;
  /**
   * PROVIDER_B_UNIT_AMOUNT (default 100): price of that product in minor units. Creem checkouts carry
   * no amount, only `units` of a product, so an order of `amount` buys `amount / unit` units and
   * must be a multiple of it.
   */
  unitAmount: number;
}

export interface PaymentsConfig {
  /** TOPUP_CURRENCY (default usd), lowercase ISO code. */
  currency: string;
  /** TOPUP_MIN / TOPUP_MAX (defaults 100 and 1,000,000): order bounds in minor units. */
  min: number;
  max: number;
  /** QUOTA_PER_UNIT (default 5000): quota units credited per currency minor unit. */
  quotaPerUnit: number;
  /** Where the provider sends the customer back (TOPUP_SUCCESS_URL / TOPUP_CANCEL_URL, else PUBLIC_URL + /topup/…). */
  successUrl: string;
  cancelUrl: string;
  /** PAYMENT_API_TIMEOUT_MS (default 15000): one call to a provider's API. */
  apiTimeoutMs: number;
  /**
   * TOPUP_CHECKOUT_DEADLINE_SECONDS (default 300, above PAYMENT_API_TIMEOUT_MS): an order still without a checkout
   * this long after its creation never gets one (its process died mid-create), so it is marked failed.
   */
  checkoutDeadlineSeconds: number;
  /**
   * TOPUP_PENDING_EXPIRY_SECONDS (default 86400, at least the checkout deadline): an order with a checkout still
   * pending this long after its creation is marked expired (providerB sends no expiry event). A payment of its
   * checkout that arrives later still credits it.
   */
  pendingExpirySeconds: number;
  providerA: ProviderAConfig | null;
  providerB: ProviderBConfig | null;
  /** TOPUP_MAX_ORDERS_PER_HOUR (default 20, 0 = no limit): orders a user may create per hour. */
  ordersPerHour: number;
  /** REDEEM_MAX_FAILURES (default 10): wrong codes a user may send per window before 429. */
  redeemMaxFailures: number;
  /** REDEEM_FAILURE_WINDOW_SECONDS (default 600): the window those failures are counted in. */
  redeemFailureWindowSeconds: number;
}

function url(env: Record<string, string | undefined>, name: string, def: string): string {
  const raw = env[name]?.trim() || def;
  let u: URL;
  try { u = new URL(raw); } catch { throw new ConfigError(`${name} must be an absolute http(s) URL, got "${raw}"`); }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`${name} must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

/** All-or-nothing: a provider is on when every one of its variables is set, and half a setup is an error. */
function group(env: Record<string, string | undefined>, names: string[]): Record<string, string> | null {
  const vals = Object.fromEntries(names.map((n) => [n, env[n]?.trim() ?? '']));
  const set = names.filter((n) => vals[n]);
  if (set.length === 0) return null;
  const missing = names.filter((n) => !vals[n]);
  if (missing.length) throw new ConfigError(`${missing.join(', ')} must be set too (got ${set.join(', ')})`);
  return vals;
}

/** Reads the TOPUP_* and PROVIDER_* variables; throws ConfigError on a bad value. */
export function paymentsConfig(env: Record<string, string | undefined>): PaymentsConfig {
  const currency = (env.TOPUP_CURRENCY?.trim() || 'usd').toLowerCase();
  if (!/^[a-z]{3}$/.test(currency)) throw new ConfigError(`TOPUP_CURRENCY must be a 3-letter ISO code, got "${env.TOPUP_CURRENCY}"`);
  const min = readIntEnv(env, 'TOPUP_MIN', 100, 1, Number.MAX_SAFE_INTEGER);
  const max = readIntEnv(env, 'TOPUP_MAX', 1_000_000, 1, Number.MAX_SAFE_INTEGER);
  if (min > max) throw new ConfigError(`TOPUP_MIN (${min}) must not exceed TOPUP_MAX (${max})`);
  const quotaPerUnit = readIntEnv(env, 'QUOTA_PER_UNIT', 5000, 1, 1_000_000_000);
  // The largest top-up must fit in an empty balance, or its paid order could never be credited.
  if (max * quotaPerUnit > MAX_BALANCE) throw new ConfigError(`TOPUP_MAX * QUOTA_PER_UNIT (the largest top-up's credit) must not exceed MAX_BALANCE (${MAX_BALANCE})`);
  const publicUrl = url(env, 'PUBLIC_URL', `http://localhost:${env.PORT?.trim() || '3000'}`);
  const a = group(env, ['PROVIDER_A_SECRET_KEY', 'PROVIDER_A_WEBHOOK_SECRET']);
  const b = group(env, ['PROVIDER_B_API_KEY', 'PROVIDER_B_WEBHOOK_SECRET', 'PROVIDER_B_PRODUCT_ID']);
  // Read whether or not the provider is on: a typo here must stop this start-up, not the one that adds the secrets.
  const aBase = url(env, 'PROVIDER_A_API_BASE', 'https://api.stripe.com');
  const aTolerance = readIntEnv(env, 'PROVIDER_A_WEBHOOK_TOLERANCE', 300, 1, 86_400);
  const bBase = url(env, 'PROVIDER_B_API_BASE', 'https://api.creem.io');
  const bUnitAmount = readIntEnv(env, 'PROVIDER_B_UNIT_AMOUNT', 100, 1, 100_000_000);
  const apiTimeoutMs = readIntEnv(env, 'PAYMENT_API_TIMEOUT_MS', 15_000, 100, 120_000);
  const checkoutDeadlineSeconds = readIntEnv(env, 'TOPUP_CHECKOUT_DEADLINE_SECONDS', 300, 1, 86_400);
  // A create call still in flight must never see its order failed under it.
  if (checkoutDeadlineSeconds * 1000 <= apiTimeoutMs) {
    throw new ConfigError(`TOPUP_CHECKOUT_DEADLINE_SECONDS (${checkoutDeadlineSeconds}) must exceed PAYMENT_API_TIMEOUT_MS (${apiTimeoutMs} ms)`);
  }
  const pendingExpirySeconds = readIntEnv(env, 'TOPUP_PENDING_EXPIRY_SECONDS', 86_400, 1, 90 * 86_400);
  // An order without a checkout is the deadline's (failed); one with a checkout is never given less time to be paid.
  if (pendingExpirySeconds < checkoutDeadlineSeconds) {
    throw new ConfigError(`TOPUP_PENDING_EXPIRY_SECONDS (${pendingExpirySeconds}) must be at least TOPUP_CHECKOUT_DEADLINE_SECONDS (${checkoutDeadlineSeconds})`);
  }
  return {
    currency, min, max, quotaPerUnit, apiTimeoutMs, checkoutDeadlineSeconds, pendingExpirySeconds,
    successUrl: url(env, 'TOPUP_SUCCESS_URL', `${publicUrl}/topup/success`),
    cancelUrl: url(env, 'TOPUP_CANCEL_URL', `${publicUrl}/topup/cancel`),
    ordersPerHour: readIntEnv(env, 'TOPUP_MAX_ORDERS_PER_HOUR', 20, 0, 100_000),
    redeemMaxFailures: readIntEnv(env, 'REDEEM_MAX_FAILURES', 10, 1, 1000),
    redeemFailureWindowSeconds: readIntEnv(env, 'REDEEM_FAILURE_WINDOW_SECONDS', 600, 1, 86_400),
    providerA: a && {
      apiBase: aBase,
      secretKey: a.PROVIDER_A_SECRET_KEY!,
      webhookSecret: a.PROVIDER_A_WEBHOOK_SECRET!,
      toleranceSeconds: aTolerance,
    },
    providerB: b && {
      apiBase: bBase,
      apiKey: b.PROVIDER_B_API_KEY!,
      webhookSecret: b.PROVIDER_B_WEBHOOK_SECRET!,
      productId: b.PROVIDER_B_PRODUCT_ID!,
      unitAmount: bUnitAmount,
    },
  };
}
