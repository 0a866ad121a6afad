/**
 * providerA: Stripe-compatible. Checkout Sessions are created form-encoded with a Bearer secret key;
 * webhooks are signed with the `Stripe-Signature` t/v1 scheme (as in Stripe's API and webhook docs).
 */
import { GatewayError } from '@gw/core';
import type { ProviderAConfig } from './config';
import {
  ProviderApiError, callProvider, idOf, int, money, parseJsonObject, str,
  shown, type CheckoutRequest, type CheckoutResult, type PaymentEvent, type PaymentProvider,
} from './provider';
import { verifyStripeSignature } from './signatures';

type FormValue = string | number | boolean | null | undefined | FormValue[] | { [k: string]: FormValue };

/** Stripe's bracket form encoding: `{a:{b:[{c:1}]}}` → `a[b][0][c]=1`. */
export function stripeForm(obj: Record<string, FormValue>): URLSearchParams {
  const out = new URLSearchParams();
  const walk = (key: string, v: FormValue) => {
    if (v === undefined || v === null) return;
    if (Array.isArray(v)) v.forEach((x, i) => walk(`${key}[${i}]`, x));
    else if (typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(`${key}[${k}]`, x);
    else out.append(key, String(v));
  };
  for (const [k, v] of Object.entries(obj)) walk(k, v);
  return out;
}

const withTradeNo = (u: string, tradeNo: string) => `${u}${u.includes('?') ? '&' : '?'}trade_no=${encodeURIComponent(tradeNo)}`;

/** A PaymentIntent id as Stripe issues them (`pi_` and letters and digits; Stripe's ids are at most 255 characters). */
const PAYMENT_INTENT_ID = /^pi_[A-Za-z0-9]{1,252}$/;

export class ProviderA implements PaymentProvider {
  readonly id = 'providerA' as const;

  constructor(private readonly cfg: ProviderAConfig, private readonly timeoutMs: number) {}

  checkAmount(): void {
    // Any positive integer in minor units is a valid price_data.unit_amount.
  }

  async createCheckout(req: CheckoutRequest): Promise<CheckoutResult> {
    const form = stripeForm({
      mode: 'payment',
      client_reference_id: req.tradeNo,
      success_url: withTradeNo(req.successUrl, req.tradeNo),
      cancel_url: withTradeNo(req.cancelUrl, req.tradeNo),
      line_items: [{
        quantity: 1,
        price_data: { currency: req.currency, unit_amount: req.amount, product_data: { name: 'Account top-up' } },
      }],
      metadata: { trade_no: req.tradeNo, user_id: req.userId },
      // Copied onto the PaymentIntent, so its charges' refunds and disputes can name the order even without payment_ref.
      payment_intent_data: { metadata: { trade_no: req.tradeNo } },
    });
    const { body } = await callProvider('providerA', `${this.cfg.apiBase}/v1/checkout/sessions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${this.cfg.secretKey}`,
        'content-type': 'application/x-www-form-urlencoded',
        // A retried create for the same order returns the same session instead of a second one.
        'idempotency-key': req.tradeNo,
      },
      body: form.toString(),
    }, this.timeoutMs);
    if (typeof body.id !== 'string' || typeof body.url !== 'string' || !body.url) {
      throw new ProviderApiError('providerA API answered without a session id and url', 200);
    }
    return { ref: body.id, url: body.url };
  }

  /**
   * The PaymentIntent's `metadata.trade_no` (our checkout sets it through payment_intent_data). Stripe copies no
   * metadata onto the Charge, Refund or Dispute, so this is how their events find an order whose payment event has not
   * been applied yet. A PaymentIntent the API does not know (404), or one without our trade no, is not ours.
   */
  async tradeNoOfPayment(paymentRef: string): Promise<string | null> {
    // The id comes from the event: "." and ".." survive encodeURIComponent and the URL parser resolves them (GET /v1/
    // with our secret key), and a 10,000-character id would be sent as is. No PaymentIntent has such an id.
    if (!PAYMENT_INTENT_ID.test(paymentRef)) return null;
    try {
      const { body } = await callProvider('providerA', `${this.cfg.apiBase}/v1/payment_intents/${encodeURIComponent(paymentRef)}`, {
        method: 'GET', headers: { authorization: `Bearer ${this.cfg.secretKey}` },
      }, this.timeoutMs);
      const t = body.metadata?.trade_no;
      return typeof t === 'string' && t ? t : null;
    } catch (e) {
      if (e instanceof ProviderApiError && e.status === 404) return null;
      throw e;
    }
  }

  verify(raw: Uint8Array, headers: Headers, now: number): void {
    verifyStripeSignature(raw, headers.get('stripe-signature'), this.cfg.webhookSecret, this.cfg.toleranceSeconds, now);
  }

  parseEvent(raw: Uint8Array): PaymentEvent {
    const ev = parseJsonObject(raw);
    const eventId = str(ev.id, 'id');
    const type = str(ev.type, 'type');
    const handled = ['checkout.session.completed', 'checkout.session.async_payment_succeeded', 'checkout.session.async_payment_failed', 'checkout.session.expired'];
    const reversals = ['charge.refunded', 'charge.refund.updated', 'refund.updated', 'refund.failed',
      'charge.dispute.created', 'charge.dispute.funds_withdrawn', 'charge.dispute.funds_reinstated', 'charge.dispute.closed'];
    if (!handled.includes(type) && !reversals.includes(type)) return { kind: 'ignored', eventId, type };
    const s = ev.data?.object;
    if (!s || typeof s !== 'object') throw new GatewayError(400, 'invalid_payload', 'Webhook body lacks data.object', { param: 'data.object' });
    if (reversals.includes(type)) return reversalEvent(eventId, type, ev.created, s);
    // A session this gateway did not create (e.g. a payment link on the same account): recorded, never an error,
    // or the provider would retry it for days.
    if (typeof s.client_reference_id !== 'string' || !s.client_reference_id) return { kind: 'noop', eventId, type, reason: 'no client_reference_id' };
    const ids = { eventId, type, tradeNo: s.client_reference_id as string, providerRef: str(s.id, 'data.object.id') };
    if (type === 'checkout.session.async_payment_failed') return { kind: 'failed', ...ids };
    if (type === 'checkout.session.expired') return { kind: 'expired', ...ids };
    // Delayed methods complete the session unpaid; they are fulfilled by async_payment_succeeded.
    if (s.payment_status !== 'paid') return { kind: 'noop', eventId, type, reason: `payment_status ${shown(s.payment_status)}` };
    return { kind: 'paid', ...ids, paymentRef: idOf(s.payment_intent) ?? undefined, ...settlement(s) };
  }
}

/**
 * What a paid session settles as, and what the customer paid when Adaptive Pricing showed them another currency.
 * Sessions created before 2025-03-31 state the customer's currency and amount in `currency`/`amount_total` and ours in
 * `currency_conversion` (`source_currency`, `amount_total`); later ones keep ours in `currency`/`amount_total` and the
 * customer's in `presentment_details`. Either way the order is checked against ours, and the customer's is kept for
 * refunds and disputes stated in it.
 */
function settlement(s: Record<string, any>): { amount: number; currency: string; paid?: { amount: number; currency: string } } {
  const amount = int(s.amount_total, 'data.object.amount_total');
  const currency = str(s.currency, 'data.object.currency');
  const cc = s.currency_conversion;
  if (cc && typeof cc === 'object') {
    return {
      amount: int(cc.amount_total, 'data.object.currency_conversion.amount_total'),
      currency: str(cc.source_currency, 'data.object.currency_conversion.source_currency'), paid: { amount, currency },
    };
  }
  const pd = s.presentment_details;
  if (pd && typeof pd === 'object') {
    return {
      amount, currency,
      paid: { amount: money(pd.presentment_amount, 'data.object.presentment_details.presentment_amount'), currency: str(pd.presentment_currency, 'data.object.presentment_details.presentment_currency') },
    };
  }
  return { amount, currency };
}

/**
 * Refunds and disputes (Stripe's Charge, Refund and Dispute objects). All name the PaymentIntent, which the
 * order keeps from its checkout.session.completed; the charge's metadata.trade_no (copied from
 * payment_intent_data) is the fallback. `charge.refunded` carries the charge's running `amount_refunded`
 * (net of the refunds failed by then), stated at the event's `created`: the latest statement wins. A refund
 * that fails or is canceled (`charge.refund.updated`, or `refund.updated` / `refund.failed`, with the Refund)
 * gives its amount back from the totals that included it. A dispute moves money only with funds_withdrawn
 * (the disputed `amount`) and funds_reinstated (won); created and closed are recorded only. A Dispute or
 * Refund never carries our trade no, so for one that arrives before its payment event the PaymentIntent is asked
 * (tradeNoOfPayment), or the event is retried (`awaitOrder`) while the API cannot answer.
 */
function reversalEvent(eventId: string, type: string, created: unknown, o: Record<string, any>): PaymentEvent {
  const lookup = { paymentRef: idOf(o.payment_intent), tradeNo: typeof o.metadata?.trade_no === 'string' ? o.metadata.trade_no : null };
  if (type === 'charge.dispute.created') return { kind: 'noop', eventId, type, reason: 'dispute opened; funds move with charge.dispute.funds_withdrawn' };
  if (type === 'charge.dispute.closed') return { kind: 'noop', eventId, type, reason: `dispute ${shown(o.status)}` };
  const refundUpdate = type !== 'charge.refunded' && !type.startsWith('charge.dispute.');
  // A Refund's metadata is the refund's own: only its payment id names our order.
  if (refundUpdate) lookup.tradeNo = null;
  if (refundUpdate && o.status !== 'failed' && o.status !== 'canceled') return { kind: 'noop', eventId, type, reason: `refund ${shown(o.status)}` };
  if (!lookup.paymentRef && !lookup.tradeNo) return { kind: 'noop', eventId, type, reason: 'no payment_intent' };
  const currency = str(o.currency, 'data.object.currency');
  const asOf = money(created, 'created');
  if (type === 'charge.refunded') {
    const key = `refund:${str(o.id, 'data.object.id')}`;
    return { kind: 'reversal', eventId, type, lookup, change: { key, action: 'refund', amount: money(o.amount_refunded, 'data.object.amount_refunded'), cumulative: true, currency, asOf } };
  }
  if (refundUpdate) {
    const change = {
      key: `refund:${str(idOf(o.charge), 'data.object.charge')}`, action: 'refund_failed' as const, amount: money(o.amount, 'data.object.amount'),
      cumulative: false, currency, asOf, refundId: str(o.id, 'data.object.id'), since: money(o.created, 'data.object.created'),
    };
    return { kind: 'reversal', eventId, type, lookup, change, awaitOrder: true };
  }
  const key = `dispute:${str(o.id, 'data.object.id')}`;
  const action = type === 'charge.dispute.funds_withdrawn' ? 'withdrawn' : 'reinstated';
  return { kind: 'reversal', eventId, type, lookup, change: { key, action, amount: money(o.amount, 'data.object.amount'), cumulative: false, currency }, awaitOrder: true };
}
