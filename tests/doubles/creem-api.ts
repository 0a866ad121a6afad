/**
 * A Creem-compatible checkout API for tests: `POST /v1/checkouts` (JSON, `x-api-key`) selling
 * `units` of a known product, answering a checkout with `checkout_url`. It records every request,
 * can be told to fail or hang, and builds the `checkout.completed` event Creem would send
 * (as in Creem's webhook docs).
 */
import type { Server } from 'bun';

export interface RecordedCreemRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: any;
}

export interface CreemCheckout {
  id: string; object: 'checkout'; product: string; units: number; request_id: string | null;
  status: 'pending' | 'completed' | 'expired'; checkout_url: string; success_url: string | null;
  mode: 'test'; metadata: Record<string, unknown> | null;
}

export interface CreemDouble {
  url: string;
  requests: RecordedCreemRequest[];
  checkouts: Map<string, CreemCheckout>;
  fail: { status: number } | 'hang' | null;
  /** While set, creates wait for it and then answer normally (the checkout exists only once it resolves). */
  holdCreates: Promise<void> | null;
  checkoutFor(tradeNo: string): CreemCheckout;
  /** A `checkout.completed` event JSON string; `order` overrides are merged into object.order. */
  completedEvent(c: CreemCheckout, order?: Record<string, unknown>, eventId?: string): string;
  /** The id of the order a checkout's payment creates (one per checkout). */
  orderFor(c: CreemCheckout): string;
  /**
   * A `refund.created` event for one refund of `amount` (this refund alone); the checkout and order are expanded
   * objects, or ids only with `ids`.
   */
  refundEvent(c: CreemCheckout, amount: number, refundId: string, opts?: { ids?: boolean; eventId?: string; status?: string }): string;
  /** A `dispute.created` event for `amount` of the checkout's payment. */
  disputeEvent(c: CreemCheckout, amount: number, disputeId: string, eventId?: string): string;
  stop(): Promise<void>;
}

const rand = () => crypto.randomUUID().replace(/-/g, '').slice(0, 16);

/** `products` maps product id → price in minor units, `currency` is Creem's uppercase code. */
export function startCreemDouble(opts: { apiKey: string; products: Record<string, number>; currency?: string }): CreemDouble {
  const requests: RecordedCreemRequest[] = [];
  const checkouts = new Map<string, CreemCheckout>();
  const hanging: Array<() => void> = [];
  const currency = opts.currency ?? 'USD';
  const err = (status: number, message: string) => Response.json({ status, error: status === 403 ? 'Forbidden' : 'Bad Request', message: [message], trace_id: rand() }, { status });
  const d: CreemDouble = {
    url: '', requests, checkouts, fail: null, holdCreates: null,
    checkoutFor(tradeNo) {
      const c = [...checkouts.values()].find((x) => x.request_id === tradeNo);
      if (!c) throw new Error(`creem double: no checkout for ${tradeNo}`);
      return c;
    },
    completedEvent(c, order = {}, eventId = `evt_${rand()}`) {
      const price = opts.products[c.product]!;
      return JSON.stringify({
        id: eventId, eventType: 'checkout.completed', created_at: Date.now(),
        object: {
          id: c.id, object: 'checkout', request_id: c.request_id, status: 'completed', mode: 'test',
          order: { id: d.orderFor(c), customer: 'cust_1', product: c.product, amount: price * c.units, currency, status: 'paid', type: 'onetime', ...order },
          product: { id: c.product, name: 'Credits', price, currency, billing_type: 'onetime' },
          customer: { id: 'cust_1', object: 'customer', email: 'a@b.co', name: 'A B', country: 'NL' },
          subscription: null, custom_fields: [], metadata: c.metadata,
        },
      });
    },
    orderFor: (c) => `ord_${c.id.slice(3)}`,
    refundEvent(c, amount, refundId, o = {}) {
      const price = opts.products[c.product]! * c.units;
      const order = { id: d.orderFor(c), object: 'order', amount: price, currency, status: 'paid', type: 'onetime', product: c.product };
      const checkout = { id: c.id, object: 'checkout', request_id: c.request_id, status: 'completed', mode: 'test', metadata: c.metadata };
      return JSON.stringify({
        id: o.eventId ?? `evt_${rand()}`, eventType: 'refund.created', created_at: Date.now(),
        object: {
          id: refundId, object: 'refund', status: o.status ?? 'succeeded', refund_amount: amount, refund_currency: currency, reason: 'requested_by_customer',
          transaction: { id: `tran_${c.id.slice(3)}`, object: 'transaction', amount: price, currency, type: 'payment', status: 'refunded', order: order.id },
          checkout: o.ids ? c.id : checkout, order: o.ids ? order.id : order, subscription: null,
          customer: { id: 'cust_1', object: 'customer', email: 'a@b.co' }, created_at: Date.now(), mode: 'test',
        },
      });
    },
    disputeEvent(c, amount, disputeId, eventId = `evt_${rand()}`) {
      return JSON.stringify({
        id: eventId, eventType: 'dispute.created', created_at: Date.now(),
        object: {
          id: disputeId, object: 'dispute', amount, currency, transaction: { id: `tran_${c.id.slice(3)}`, order: d.orderFor(c) },
          checkout: c.id, order: d.orderFor(c), customer: { id: 'cust_1' }, created_at: Date.now(), mode: 'test',
        },
      });
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
      const text = await req.text();
      let body: any = null;
      try { body = JSON.parse(text); } catch { /* recorded as null */ }
      requests.push({ method: req.method, path: url.pathname, headers: Object.fromEntries(req.headers), body });
      if (req.method !== 'POST' || url.pathname !== '/v1/checkouts') return err(404, `Cannot ${req.method} ${url.pathname}`);
      if (req.headers.get('x-api-key') !== opts.apiKey) return err(403, 'Invalid API key');
      if (d.fail === 'hang') return new Promise<Response>((resolve) => hanging.push(() => resolve(new Response(null, { status: 504 }))));
      if (d.holdCreates) await d.holdCreates;
      if (d.fail) return err(d.fail.status, 'Failure requested by the test');
      if (!body || typeof body.product_id !== 'string') return err(400, 'product_id must be a string');
      if (!(body.product_id in opts.products)) return err(404, 'Product not found');
      const units = body.units ?? 1;
      if (!Number.isInteger(units) || units < 1) return err(400, 'units must be a positive integer');
      const id = `ch_${rand()}`;
      const c: CreemCheckout = {
        id, object: 'checkout', product: body.product_id, units, request_id: body.request_id ?? null, status: 'pending',
        checkout_url: `https://checkout.creem.test/${id}`, success_url: body.success_url ?? null, mode: 'test', metadata: body.metadata ?? null,
      };
      checkouts.set(id, c);
      return Response.json(c);
    },
  });
  d.url = `http://127.0.0.1:${server.port}`;
  return d;
}
