/**
 * Signed payment callbacks. After the signature check, one IMMEDIATE transaction claims the event id,
 * moves the order out of 'pending' and writes the ledger credit: a crash leaves all or nothing, and a
 * duplicate or concurrent delivery finds the id claimed (or the order no longer pending) and changes
 * nothing. Two different events for one order credit once: the pending guard and the ledger's unique
 * (kind, ref = trade no) both stand in the way.
 */
import { GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import type { Db, LedgerRepo, TopupOrdersRepo, WebhookEventsRepo } from '@gw/db';
import type { PaymentEvent, PaymentProvider, ProviderId } from './provider';

/**
 * What happened to an event, stored in webhook_events.outcome and returned in the 200 answer:
 * credited | failed | expired | duplicate | ignored | noop:<why> | unknown_order | not_pending:<status> |
 * mismatch:<what>. Only `credited` changes a balance.
 */
export interface WebhookResult {
  outcome: string;
  tradeNo: string | null;
}

type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

export class WebhookService {
  constructor(
    private readonly db: Db,
    private readonly orders: TopupOrdersRepo,
    private readonly events: WebhookEventsRepo,
    private readonly ledger: LedgerRepo,
    private readonly providers: ReadonlyMap<ProviderId, PaymentProvider>,
    private readonly bus: ChangeBus,
  ) {}

  /**
   * Verifies and applies one delivery. Throws a 400 GatewayError (nothing changes) for a missing
   * body or signature, a bad or stale signature, or a signed body that is not an event. Every other
   * outcome is a 200: retrying would not change it, and providers retry anything else for days.
   */
  handle(providerId: ProviderId, raw: Uint8Array, headers: Headers): WebhookResult {
    const p = this.providers.get(providerId);
    if (!p) throw new GatewayError(400, 'provider_not_configured', `Payment provider ${providerId} is not configured on this gateway`);
    if (raw.byteLength === 0) throw new GatewayError(400, 'missing_body', 'Webhook body is empty');
    p.verify(raw, headers, nowSeconds());
    const ev = p.parseEvent(raw);
    if (ev.kind === 'ignored') return { outcome: 'ignored', tradeNo: null };
    let creditedUser: number | null = null;
    const result = this.db.transaction((tx) => {
      const at = nowSeconds();
      if (!this.events.claim({ provider: p.id, eventId: ev.eventId, type: ev.type, at }, tx)) {
        return { outcome: 'duplicate', tradeNo: 'tradeNo' in ev ? ev.tradeNo : null };
      }
      const r = this.apply(tx, p, ev, at);
      this.events.setOutcome(p.id, ev.eventId, r.outcome, tx);
      creditedUser = r.creditedUser;
      return { outcome: r.outcome, tradeNo: r.tradeNo };
    }, { behavior: 'immediate' });
    // After commit: the balance caches refresh only once the credit is durable.
    if (creditedUser !== null) this.bus.emit('user.changed', { userId: creditedUser });
    return result;
  }

  private apply(tx: Tx, p: PaymentProvider, ev: Exclude<PaymentEvent, { kind: 'ignored' }>, at: number): WebhookResult & { creditedUser: number | null } {
    const none = (outcome: string, tradeNo: string | null = null) => ({ outcome, tradeNo, creditedUser: null });
    if (ev.kind === 'noop') return none(`noop:${ev.reason}`);
    const order = this.orders.byTradeNo(ev.tradeNo, tx);
    if (!order || order.provider !== p.id) return none('unknown_order', ev.tradeNo);
    // The checkout must be the one this order created (once its id is known).
    if (order.providerRef && order.providerRef !== ev.providerRef) return none('mismatch:checkout', order.tradeNo);
    if (ev.kind !== 'paid') {
      const closed = this.orders.closePending(order.tradeNo, ev.kind, at, tx);
      return none(closed ? ev.kind : `not_pending:${order.status}`, order.tradeNo);
    }
    // Paid: the money must be exactly what the order asked for, or nothing is credited. The outcome
    // is recorded and the order stays pending for an operator to reconcile.
    if (ev.amount !== order.amount) return none(`mismatch:amount ${ev.amount} != ${order.amount}`, order.tradeNo);
    if (ev.currency.toLowerCase() !== order.currency.toLowerCase()) return none(`mismatch:currency ${ev.currency.toLowerCase()} != ${order.currency}`, order.tradeNo);
    if (p.productId && ev.productId !== p.productId) return none(`mismatch:product ${ev.productId ?? '(none)'}`, order.tradeNo);
    const paid = this.orders.closePending(order.tradeNo, 'paid', at, tx);
    if (!paid) return none(`not_pending:${order.status}`, order.tradeNo);
    const balance = this.ledger.apply({
      userId: order.userId, kind: 'topup', amount: order.credit, ref: order.tradeNo,
      note: `${p.id} ${ev.providerRef}`, at,
    }, tx);
    // The order was pending, so its credit cannot exist; if it does, undo the status change too.
    if (balance === null) throw new Error(`ledger already holds topup ${order.tradeNo} for a pending order`);
    return { outcome: 'credited', tradeNo: order.tradeNo, creditedUser: order.userId };
  }
}
