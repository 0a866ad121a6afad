/**
 * What the top-up and webhook services need from a payment provider. Generic code never branches on
 * a provider id: each difference (request shape, signature scheme, event layout, amount rules) is a
 * method here.
 */
import { GatewayError, readBounded } from '@gw/core';
import type { OrderLookup } from '@gw/db';

export const PROVIDER_IDS = ['providerA', 'providerB'] as const;
export type ProviderId = (typeof PROVIDER_IDS)[number];

export interface CheckoutRequest {
  tradeNo: string;
  userId: number;
  /** Minor units. */
  amount: number;
  currency: string;
  successUrl: string;
  cancelUrl: string;
}

export interface CheckoutResult {
  /** The provider's id of the checkout (Stripe session id, Creem checkout id). */
  ref: string;
  url: string;
}

/**
 * Money taken back from a payment, as an event states it. `key` names the reversal within its order:
 * 'refund:<charge id>' (providerA: `amount` is the charge's running refunded total, `cumulative`, stated at
 * `asOf`), 'refund:<refund id>' (providerB: `amount` is this refund alone), 'dispute:<dispute id>'. A
 * `refund_failed` names the charge's key and the refund (`refundId`, its `amount`, created at `since`,
 * failed at `asOf`).
 */
export interface ReversalRequest {
  key: string;
  action: 'refund' | 'withdrawn' | 'reinstated' | 'refund_failed';
  /** Minor units: refunded (running total when `cumulative`), disputed, or the failed refund's; unused when reinstated. */
  amount: number;
  cumulative: boolean;
  /** When the event states one: it must be the order's. */
  currency: string | null;
  /** The provider's time of the statement (Stripe's event `created`), for running totals and refund failures. */
  asOf?: number;
  refundId?: string;
  since?: number;
}

/** A verified webhook event, reduced to what the gateway acts on. */
export type PaymentEvent =
  /**
   * `paymentRef`: the payment's own id (PaymentIntent, Creem order), kept so refunds and disputes find the order.
   * `shortfall`: why the customer paid less than `amount` states (a discount), when the provider says so apart from it.
   * `amount`/`currency` are what the payment settles as (checked against the order); `paid` is what the customer paid
   * when the provider states it apart (a tax on top, a presentment currency): refunds and disputes state that money.
   */
  | { kind: 'paid'; eventId: string; type: string; tradeNo: string; providerRef: string; paymentRef?: string; amount: number; currency: string;
    productId?: string; shortfall?: string; paid?: { amount: number; currency: string } }
  /** A refund, a dispute's withdrawal or its reinstatement (won) for the order that `lookup` finds. */
  /**
   * `awaitOrder`: the event cannot name our trade no (a Stripe Dispute or Refund), so when no order has its payment
   * id yet the payment event may still be on its way. The provider's API is asked whose payment it is
   * (tradeNoOfPayment); without one, or while it cannot answer, a retryable 409 with nothing recorded.
   */
  | { kind: 'reversal'; eventId: string; type: string; lookup: OrderLookup; change: ReversalRequest; awaitOrder?: boolean }
  | { kind: 'failed' | 'expired'; eventId: string; type: string; tradeNo: string; providerRef: string }
  /** A known kind that needs no action yet (checkout completed, payment still unpaid): recorded only. */
  | { kind: 'noop'; eventId: string; type: string; reason: string }
  /** A kind the gateway does not handle: answered 200, nothing recorded. */
  | { kind: 'ignored'; eventId: string; type: string };

export interface PaymentProvider {
  readonly id: ProviderId;
  /** When set, a paid event must be for this product (a checkout of another product is not a top-up). */
  readonly productId?: string;
  /** Throws a 400 GatewayError (param `amount`) when the provider cannot charge this amount. */
  checkAmount(amount: number): void;
  /** Asks the provider's API for a hosted checkout. Throws on any failure (the caller maps it to 502). */
  createCheckout(req: CheckoutRequest): Promise<CheckoutResult>;
  /** Verifies the signature over the raw body; throws a 400 GatewayError. */
  verify(raw: Uint8Array, headers: Headers, now: number): void;
  /** Reads a verified body; throws a 400 GatewayError when it is not an event of this provider. */
  parseEvent(raw: Uint8Array): PaymentEvent;
  /**
   * Asks the provider's API which of our orders a payment belongs to (the trade no its checkout put on it), for a
   * refund or dispute whose payment no order knows yet; null when the payment is not ours. Throws
   * ProviderApiError when the API cannot say. Absent when every reversal event names its order itself.
   */
  tradeNoOfPayment?(paymentRef: string): Promise<string | null>;
}

/** Failure of a provider API call; the message is safe to show (no secrets, no upstream body). */
export class ProviderApiError extends Error {
  override name = 'ProviderApiError';
  constructor(message: string, readonly status: number | null, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** JSON.parse of a verified body as an object, or a 400. */
export function parseJsonObject(raw: Uint8Array): Record<string, any> {
  let v: unknown;
  try { v = JSON.parse(new TextDecoder().decode(raw)); } catch { v = undefined; }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new GatewayError(400, 'invalid_payload', 'Webhook body is not a JSON object');
  return v as Record<string, any>;
}

/** A required string field of an event, or a 400 naming it. */
export function str(v: unknown, param: string): string {
  if (typeof v !== 'string' || v === '') throw new GatewayError(400, 'invalid_payload', `Webhook body lacks ${param}`, { param });
  return v;
}

/** The id of a field that is an id or an expanded object with one (Stripe and Creem expand on request); null when absent. */
export function idOf(v: unknown): string | null {
  if (typeof v === 'string' && v) return v;
  if (v && typeof v === 'object' && typeof (v as { id?: unknown }).id === 'string' && (v as { id: string }).id) return (v as { id: string }).id;
  return null;
}

/** A required integer field of an event that is money, never negative, or a 400 naming it. */
export function money(v: unknown, param: string): number {
  const n = int(v, param);
  if (n < 0) throw new GatewayError(400, 'invalid_payload', `Webhook body has a negative ${param}`, { param });
  return n;
}

/** An optional money field: null when absent or null, else as `money` (a present field of another type is a 400). */
export function optMoney(v: unknown, param: string): number | null {
  return v === undefined || v === null ? null : money(v, param);
}

/** A required integer field of an event, or a 400 naming it. */
export function int(v: unknown, param: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new GatewayError(400, 'invalid_payload', `Webhook body lacks integer ${param}`, { param });
  return v;
}

const PROVIDER_BODY_BYTES = 1024 * 1024;

/** fetch with a deadline; network errors and timeouts become ProviderApiError. */
export async function callProvider(name: string, url: string, init: RequestInit, timeoutMs: number): Promise<{ status: number; body: any }> {
  let res: Response;
  try {
    res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  } catch (e) {
    const timeout = (e as Error)?.name === 'TimeoutError';
    throw new ProviderApiError(`${name} API ${timeout ? `did not answer within ${timeoutMs} ms` : 'is unreachable'}`, null, { cause: e });
  }
  // A provider answer is a few KiB: a larger one is not read (the deadline alone would let it fill memory).
  const read = await readBounded(res.body, { limit: PROVIDER_BODY_BYTES, deadline: Infinity }).catch(() => null);
  const text = read?.ok ? Buffer.from(read.bytes).toString('utf8') : '';
  let body: any = null;
  try { body = JSON.parse(text); } catch { /* non-JSON answer: handled by the status check */ }
  if (!res.ok) {
    // Stripe's error.code / Creem's message say what went wrong without echoing credentials.
    const detail = typeof body?.error?.code === 'string' ? ` (${body.error.code})` : '';
    throw new ProviderApiError(`${name} API answered HTTP ${res.status}${detail}`, res.status);
  }
  if (!body || typeof body !== 'object') throw new ProviderApiError(`${name} API answered with a non-JSON body`, res.status);
  return { status: res.status, body };
}

/**
 * A signed body's field as an outcome shows it. Never `String(v)`: an object whose `toString` is not a
 * function (`{"toString":1}`) throws, which answered a validly signed event with 500 on every retry.
 */
export function shown(v: unknown): string {
  if (typeof v === 'string') return v.slice(0, 64);
  if (v === null || v === undefined || typeof v === 'number' || typeof v === 'boolean') return String(v);
  return Array.isArray(v) ? 'array' : typeof v;
}
