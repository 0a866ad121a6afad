/**
 * providerB: Creem-compatible. `POST /v1/checkouts` (JSON, `x-api-key`) sells `units` of a fixed
 * product; there is no free amount field, so the order amount buys `amount / unitAmount` units of a
 * product priced at `unitAmount`. Webhooks carry `creem-signature` (as in Creem's webhook docs).
 */
import { GatewayError } from '@gw/core';
import type { ProviderBConfig } from './config';
import {
  ProviderApiError, callProvider, idOf, int, money, optMoney, parseJsonObject, str,
  shown, type CheckoutRequest, type CheckoutResult, type PaymentEvent, type PaymentProvider,
} from './provider';
import { verifyCreemSignature } from './signatures';

export class ProviderB implements PaymentProvider {
  readonly id = 'providerB' as const;
  readonly productId: string;

  constructor(private readonly cfg: ProviderBConfig, private readonly timeoutMs: number) {
    this.productId = cfg.productId;
  }

  checkAmount(amount: number): void {
    if (amount % this.cfg.unitAmount !== 0) {
      throw new GatewayError(400, 'invalid_amount', `providerB sells in steps of ${this.cfg.unitAmount} minor units; amount must be a multiple of it`, { param: 'amount' });
    }
  }

  async createCheckout(req: CheckoutRequest): Promise<CheckoutResult> {
    const { body } = await callProvider('providerB', `${this.cfg.apiBase}/v1/checkouts`, {
      method: 'POST',
      headers: { 'x-api-key': this.cfg.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({
        product_id: this.cfg.productId,
        request_id: req.tradeNo,
        units: req.amount / this.cfg.unitAmount,
        success_url: `${req.successUrl}${req.successUrl.includes('?') ? '&' : '?'}trade_no=${encodeURIComponent(req.tradeNo)}`,
        metadata: { trade_no: req.tradeNo, user_id: String(req.userId) },
      }),
    }, this.timeoutMs);
    if (typeof body.id !== 'string' || typeof body.checkout_url !== 'string' || !body.checkout_url) {
      throw new ProviderApiError('providerB API answered without a checkout id and checkout_url', 200);
    }
    return { ref: body.id, url: body.checkout_url };
  }

  verify(raw: Uint8Array, headers: Headers): void {
    verifyCreemSignature(raw, headers.get('creem-signature'), this.cfg.webhookSecret);
  }

  parseEvent(raw: Uint8Array): PaymentEvent {
    const ev = parseJsonObject(raw);
    const eventId = str(ev.id, 'id');
    const type = str(ev.eventType, 'eventType');
    if (type !== 'checkout.completed' && type !== 'refund.created' && type !== 'dispute.created') return { kind: 'ignored', eventId, type };
    const o = ev.object;
    if (!o || typeof o !== 'object') throw new GatewayError(400, 'invalid_payload', 'Webhook body lacks object', { param: 'object' });
    if (type !== 'checkout.completed') return reversalEvent(eventId, type, o);
    if (typeof o.request_id !== 'string' || !o.request_id) return { kind: 'noop', eventId, type, reason: 'no request_id' };
    const order = o.order;
    if (!order || typeof order !== 'object') throw new GatewayError(400, 'invalid_payload', 'Webhook body lacks object.order', { param: 'object.order' });
    if (order.status !== undefined && order.status !== 'paid') return { kind: 'noop', eventId, type, reason: `order status ${shown(order.status)}` };
    // The product is on the order as an id, and on the checkout as an object (or an id when not expanded).
    const productId = typeof order.product === 'string' ? order.product : typeof o.product === 'string' ? o.product : o.product?.id;
    const amount = int(order.amount, 'object.order.amount');
    // A discount code entered at Creem's checkout (any code the merchant made for all products) lowers what the
    // customer pays, while `amount` may still state the product total: it is credited only when nothing was
    // discounted and what was paid covers it (a tax charged on top makes `amount_paid` larger, never smaller).
    const discount = optMoney(order.discount_amount, 'object.order.discount_amount');
    const paid = optMoney(order.amount_paid, 'object.order.amount_paid');
    const shortfall = discount ? `discount ${discount}` : paid !== null && paid < amount ? `amount_paid ${paid} < ${amount}` : undefined;
    return {
      kind: 'paid', eventId, type, tradeNo: o.request_id, providerRef: str(o.id, 'object.id'), paymentRef: idOf(order) ?? undefined,
      amount, currency: str(order.currency, 'object.order.currency'),
      productId: typeof productId === 'string' ? productId : undefined, shortfall,
      // With a tax on top the customer paid more than `amount`, and Creem's refunds and disputes state that money.
      ...(paid !== null ? { paid: { amount: paid, currency: str(order.currency, 'object.order.currency') } } : {}),
    };
  }
}

/**
 * refund.created (a Refund: `refund_amount` of this refund alone, `refund_currency`) and dispute.created (a
 * Dispute: `amount`, `currency`) name the checkout, the order and the transaction, each an id or an expanded
 * object. The order is found by the checkout's request_id (our trade no) when expanded, else the order id kept at
 * credit time, else the checkout id. A refund counts once per refund id; a dispute takes its amount at creation
 * (Creem's disputes hold the funds from then; no reinstatement event is known, so a won dispute is an operator's
 * adjustment). A refund that failed or was canceled moves nothing.
 */
function reversalEvent(eventId: string, type: string, o: Record<string, any>): PaymentEvent {
  const tradeNo = typeof o.checkout?.request_id === 'string' ? o.checkout.request_id : null;
  const lookup = { tradeNo, paymentRef: idOf(o.order) ?? idOf(o.transaction?.order), checkoutRef: idOf(o.checkout) };
  if (!lookup.tradeNo && !lookup.paymentRef && !lookup.checkoutRef) return { kind: 'noop', eventId, type, reason: 'no checkout or order' };
  const id = str(o.id, 'object.id');
  if (type === 'refund.created') {
    if (o.status === 'failed' || o.status === 'canceled') return { kind: 'noop', eventId, type, reason: `refund ${o.status}` };
    const currency = typeof o.refund_currency === 'string' ? o.refund_currency : null;
    return { kind: 'reversal', eventId, type, lookup, change: { key: `refund:${id}`, action: 'refund', amount: money(o.refund_amount, 'object.refund_amount'), cumulative: false, currency } };
  }
  const currency = typeof o.currency === 'string' ? o.currency : null;
  return { kind: 'reversal', eventId, type, lookup, change: { key: `dispute:${id}`, action: 'withdrawn', amount: money(o.amount, 'object.amount'), cumulative: false, currency } };
}
