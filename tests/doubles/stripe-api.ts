/**
 * A Stripe-compatible Checkout API for tests: `POST /v1/checkout/sessions`, form-encoded with a
 * Bearer secret key, answering a `checkout.session` object (or Stripe's `{error:{type,code,message,param}}`), and
 * `GET /v1/payment_intents/:id` for the PaymentIntent of a session it created (its metadata from payment_intent_data).
 * It records every request, can be told to fail or hang, and builds the webhook events Stripe would
 * send for a session it created (as in Stripe's API and webhook docs).
 */
import type { Server } from 'bun';

export interface RecordedStripeRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  /** The form body, decoded (bracket keys kept as-is: `line_items[0][price_data][unit_amount]`). */
  form: Record<string, string>;
}

export interface StripeSession {
  id: string; object: 'checkout.session'; mode: string; status: 'open' | 'complete' | 'expired';
  payment_status: 'paid' | 'unpaid' | 'no_payment_required'; client_reference_id: string | null;
  metadata: Record<string, string>; amount_subtotal: number; amount_total: number; currency: string;
  url: string; success_url: string; cancel_url: string | null; created: number; expires_at: number;
  payment_intent: string | null; customer: string | null;
}

export interface StripeDouble {
  url: string;
  requests: RecordedStripeRequest[];
  sessions: Map<string, StripeSession>;
  /** Next creates answer this status with a Stripe error body; 'hang' never answers; null = normal. */
  fail: { status: number; code?: string } | 'hang' | 'no-url' | null;
  /** While set, creates wait for it and then answer normally (the session exists only once it resolves). */
  holdCreates: Promise<void> | null;
  /** `GET /v1/payment_intents/:id` answers 500 while set. */
  failLookups: boolean;
  /** `GET /v1/payment_intents/:id` answers after this many ms (0: at once). */
  lookupDelayMs: number;
  /** The most `GET /v1/payment_intents/:id` requests this double has had in progress at once (a test may reset it). */
  lookupsAtOnceMax: number;
  /** PaymentIntents of the same account made elsewhere (no metadata of ours): known to the API, not to the gateway. */
  foreignPaymentIntents: Set<string>;
  /** The session created for a trade number (client_reference_id). */
  sessionFor(tradeNo: string): StripeSession;
  /**
   * A Stripe event JSON string for a session, with overrides merged into data.object. A paid session names
   * its PaymentIntent (paymentIntentFor), as Stripe's does once the payment is confirmed.
   */
  event(type: string, session: StripeSession, objectOverrides?: Partial<StripeSession>, eventId?: string): string;
  /** The PaymentIntent id of a session's payment (one per session). */
  paymentIntentFor(session: StripeSession): string;
  /**
   * `charge.refunded` for the session's charge: a Charge whose `amount_refunded` is the running total and whose
   * `refunds` list holds one refund per step in `steps` (running totals, ascending; the last is `amount_refunded`).
   */
  refundEvent(session: StripeSession, steps: number[], eventId?: string, created?: number): string;
  /**
   * `charge.refund.updated` (or `type`) for refund number `index` of the session's charge (the ids refundEvent
   * gives), of `amount`, now `status`; `created` is the event's time (the failure's), `refundCreated` the refund's.
   */
  refundUpdatedEvent(session: StripeSession, index: number, amount: number, status: string,
    opts?: { created?: number; refundCreated?: number; eventId?: string; type?: string }): string;
  /** A `charge.dispute.*` event with the Dispute of the session's charge. */
  disputeEvent(type: string, session: StripeSession, amount: number, disputeId: string, status?: string, eventId?: string): string;
  stop(): Promise<void>;
}

const rand = () => crypto.randomUUID().replace(/-/g, '').slice(0, 24);
const now = () => Math.floor(Date.now() / 1000);
const envelope = (type: string, object: unknown, id: string, created = now()) => JSON.stringify({
  id, object: 'event', api_version: '2025-01-27.acacia', created, livemode: false,
  pending_webhooks: 1, request: { id: null, idempotency_key: null }, type, data: { object },
});

export function startStripeDouble(opts: { secretKey: string }): StripeDouble {
  const requests: RecordedStripeRequest[] = [];
  const sessions = new Map<string, StripeSession>();
  // A session's PaymentIntent metadata (payment_intent_data[metadata]), by PaymentIntent id.
  const intentMetadata = new Map<string, Record<string, string>>();
  const hanging: Array<() => void> = [];
  const err = (status: number, type: string, message: string, extra: Record<string, string> = {}) =>
    Response.json({ error: { type, message, ...extra } }, { status });
  let lookupsAtOnce = 0;
  const d: StripeDouble = {
    url: '', requests, sessions, fail: null, holdCreates: null, failLookups: false, lookupDelayMs: 0, lookupsAtOnceMax: 0, foreignPaymentIntents: new Set(),
    sessionFor(tradeNo) {
      const s = [...sessions.values()].find((x) => x.client_reference_id === tradeNo);
      if (!s) throw new Error(`stripe double: no session for ${tradeNo}`);
      return s;
    },
    event(type, session, objectOverrides = {}, eventId = `evt_${rand()}`) {
      const pi = objectOverrides.payment_status === 'paid' ? { payment_intent: d.paymentIntentFor(session) } : {};
      return envelope(type, { ...session, ...pi, ...objectOverrides }, eventId);
    },
    paymentIntentFor: (session) => `pi_${session.id.slice('cs_test_'.length)}`,
    refundEvent(session, steps, eventId = `evt_${rand()}`, created = now()) {
      const pi = d.paymentIntentFor(session);
      const charge = `ch_${pi.slice(3)}`;
      const total = steps.at(-1) ?? 0;
      const refunds = steps.map((cum, i) => ({
        id: `re_${pi.slice(3)}_${i}`, object: 'refund', amount: cum - (steps[i - 1] ?? 0), charge, payment_intent: pi,
        currency: session.currency, status: 'succeeded', created,
      })).reverse();
      return envelope('charge.refunded', {
        id: charge, object: 'charge', amount: session.amount_total, amount_captured: session.amount_total, amount_refunded: total,
        captured: true, currency: session.currency, paid: true, refunded: total === session.amount_total, status: 'succeeded',
        payment_intent: pi, metadata: {}, disputed: false,
        refunds: { object: 'list', data: refunds, has_more: false, total_count: refunds.length, url: `/v1/charges/${charge}/refunds` },
      }, eventId, created);
    },
    refundUpdatedEvent(session, index, amount, status, opts = {}) {
      const pi = d.paymentIntentFor(session);
      const created = opts.created ?? now();
      return envelope(opts.type ?? 'charge.refund.updated', {
        id: `re_${pi.slice(3)}_${index}`, object: 'refund', amount, charge: `ch_${pi.slice(3)}`, payment_intent: pi, currency: session.currency,
        status, failure_reason: status === 'failed' ? 'expired_or_canceled_card' : null, created: opts.refundCreated ?? created, metadata: {},
      }, opts.eventId ?? `evt_${rand()}`, created);
    },
    disputeEvent(type, session, amount, disputeId, status = 'needs_response', eventId = `evt_${rand()}`) {
      const pi = d.paymentIntentFor(session);
      return envelope(type, {
        id: disputeId, object: 'dispute', amount, charge: `ch_${pi.slice(3)}`, payment_intent: pi, currency: session.currency,
        reason: 'fraudulent', status, is_charge_refundable: false, metadata: {}, balance_transactions: [], created: now(),
      }, eventId);
    },
    async stop() {
      for (const h of hanging) h();
      await server.stop(true);
    },
  };
  const server: Server<undefined> = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    async fetch(req) {
      const url = new URL(req.url);
      const form = Object.fromEntries(new URLSearchParams(await req.text()));
      requests.push({ method: req.method, path: url.pathname, headers: Object.fromEntries(req.headers), form });
      const intent = /^\/v1\/payment_intents\/([^/]+)$/.exec(url.pathname);
      if (req.method === 'GET' && intent) {
        if (req.headers.get('authorization') !== `Bearer ${opts.secretKey}`) return err(401, 'invalid_request_error', 'Invalid API Key provided: sk_****', { code: 'api_key_invalid' });
        if (d.lookupDelayMs) {
          d.lookupsAtOnceMax = Math.max(d.lookupsAtOnceMax, ++lookupsAtOnce);
          try { await Bun.sleep(d.lookupDelayMs); } finally { lookupsAtOnce--; }
        }
        if (d.failLookups) return err(500, 'api_error', 'Failure requested by the test');
        const id = decodeURIComponent(intent[1]!);
        const metadata = intentMetadata.get(id) ?? (d.foreignPaymentIntents.has(id) ? {} : null);
        if (!metadata) return err(404, 'invalid_request_error', `No such payment_intent: '${id}'`, { code: 'resource_missing', param: 'intent' });
        return Response.json({ id, object: 'payment_intent', status: 'succeeded', metadata });
      }
      if (req.method !== 'POST' || url.pathname !== '/v1/checkout/sessions') {
        return err(404, 'invalid_request_error', `Unrecognized request URL (${req.method}: ${url.pathname}).`);
      }
      if (req.headers.get('authorization') !== `Bearer ${opts.secretKey}`) {
        return err(401, 'invalid_request_error', 'Invalid API Key provided: sk_****', { code: 'api_key_invalid' });
      }
      if (!/application\/x-www-form-urlencoded/.test(req.headers.get('content-type') ?? '')) {
        return err(400, 'invalid_request_error', 'Invalid request (check that your POST content type is application/x-www-form-urlencoded).');
      }
      if (d.fail === 'hang') return new Promise<Response>((resolve) => hanging.push(() => resolve(new Response(null, { status: 504 }))));
      if (d.holdCreates) await d.holdCreates;
      if (d.fail && d.fail !== 'no-url') return err(d.fail.status, d.fail.status >= 500 ? 'api_error' : 'invalid_request_error', 'Failure requested by the test', d.fail.code ? { code: d.fail.code } : {});
      for (const p of ['mode', 'success_url', 'line_items[0][price_data][currency]', 'line_items[0][price_data][unit_amount]', 'line_items[0][quantity]']) {
        if (!form[p]) return err(400, 'invalid_request_error', `Missing required param: ${p}.`, { code: 'parameter_missing', param: p });
      }
      const unit = Number(form['line_items[0][price_data][unit_amount]']);
      const qty = Number(form['line_items[0][quantity]']);
      if (!Number.isInteger(unit) || !Number.isInteger(qty)) return err(400, 'invalid_request_error', 'Invalid integer', { code: 'parameter_invalid_integer' });
      const id = `cs_test_${rand()}`;
      const metadata: Record<string, string> = {};
      for (const [k, v] of Object.entries(form)) { const m = /^metadata\[(.+)\]$/.exec(k); if (m) metadata[m[1]!] = v; }
      const session: StripeSession = {
        id, object: 'checkout.session', mode: form.mode!, status: 'open', payment_status: 'unpaid',
        client_reference_id: form.client_reference_id ?? null, metadata,
        amount_subtotal: unit * qty, amount_total: unit * qty, currency: form['line_items[0][price_data][currency]']!.toLowerCase(),
        url: `https://checkout.stripe.test/c/pay/${id}`, success_url: form.success_url!, cancel_url: form.cancel_url ?? null,
        created: now(), expires_at: now() + 86_400, payment_intent: null, customer: null,
      };
      sessions.set(id, session);
      const piMetadata: Record<string, string> = {};
      for (const [k, v] of Object.entries(form)) { const m = /^payment_intent_data\[metadata\]\[(.+)\]$/.exec(k); if (m) piMetadata[m[1]!] = v; }
      intentMetadata.set(d.paymentIntentFor(session), piMetadata);
      return Response.json(d.fail === 'no-url' ? { ...session, url: null } : session);
    },
  });
  d.url = `http://127.0.0.1:${server.port}`;
  return d;
}
