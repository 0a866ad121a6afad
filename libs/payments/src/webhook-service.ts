/**
 * Signed payment callbacks. After the signature check, one unit of work (LedgerStore.creditTopupOnce) claims the event id,
 * moves the order out of 'pending' and writes the ledger credit: a crash leaves all or nothing, and a
 * duplicate or concurrent delivery finds the id claimed (or the order no longer pending) and changes
 * nothing. Two different events for one order credit once: the pending guard and the ledger's unique
 * (kind, ref = trade no) both stand in the way.
 *
 * Refunds and disputes go through LedgerStore.reverseTopupOnce instead (rules in reversal-rules.ts): the
 * user keeps nothing the payment no longer pays for, even when the balance goes below zero.
 */
import { balanceLimitError, GatewayError, nowSeconds, silentLogger, type ChangeBus, type Logger } from '@gw/core';
import { BALANCE_LIMIT_OUTCOME, type LedgerStore, type OrderLookup, TopupDecision, TopupOrderRow, TopupReversalRow } from '@gw/db';
import type { PaymentEvent, PaymentProvider, ProviderId } from './provider';
import { clawbackAtCredit, decideReversal, inOrderUnits } from './reversal-rules';
import { PaymentLookups } from './payment-lookups';

/**
 * What happened to an event, stored in webhook_events.outcome and returned in the 200 answer:
 * credited | failed | expired | duplicate | ignored | noop:<why> | unknown_order | not_pending:<status> |
 * mismatch:<what> | user_not_found | balance_limit (answered 409, see handle); for refunds and disputes refunded | refund_failed | dispute_withdrawn |
 * dispute_reinstated | not_paid:<status> (see reversal-rules.ts). Only `credited` and those four change a balance.
 */
export interface WebhookResult {
  outcome: string;
  tradeNo: string | null;
}

export class WebhookService {
  private readonly lookups = new PaymentLookups();

  constructor(
    private readonly ledger: LedgerStore,
    private readonly providers: ReadonlyMap<ProviderId, PaymentProvider>,
    private readonly bus: ChangeBus,
    private readonly log: Logger = silentLogger,
  ) {}

  /**
   * Verifies and applies one delivery. Throws a 400 GatewayError (nothing changes) for a missing
   * body or signature, a bad or stale signature, or a signed body that is not an event. Every other
   * outcome is a 200: retrying would not change it, and providers retry anything else for days. Except one:
   * a paid order whose credit would take its user's balance above MAX_BALANCE is recorded (event outcome
   * `balance_limit`, order still pending, a `topup.balance_limit` warning) and answered 409 `balance_limit`, so
   * the provider retries it: the retry is processed again and credits once the user has spent enough. A reversal
   * (a won dispute) that would pass the bound throws the same 409 and records nothing, so its retry runs again too.
   * So does a refund or dispute whose payment no order knows yet while the provider's API cannot say whose it is
   * (409 order_not_yet_known, see reverse).
   */
  async handle(providerId: ProviderId, raw: Uint8Array, headers: Headers): Promise<WebhookResult> {
    const p = this.providers.get(providerId);
    if (!p) throw new GatewayError(400, 'provider_not_configured', `Payment provider ${providerId} is not configured on this gateway`);
    if (raw.byteLength === 0) throw new GatewayError(400, 'missing_body', 'Webhook body is empty');
    p.verify(raw, headers, nowSeconds());
    const ev = p.parseEvent(raw);
    if (ev.kind === 'ignored') return { outcome: 'ignored', tradeNo: null };
    if (ev.kind === 'reversal') return this.reverse(p, ev);
    const tradeNo = 'tradeNo' in ev ? ev.tradeNo : null;
    const r = await this.ledger.creditTopupOnce(
      { provider: p.id, eventId: ev.eventId, type: ev.type, at: nowSeconds(), tradeNo },
      (order, ownerExists, reversals) => decide(p, ev, order, ownerExists, reversals),
    );
    if (r.duplicate) return { outcome: 'duplicate', tradeNo };
    if (r.outcome === BALANCE_LIMIT_OUTCOME) {
      this.log.warn('topup.balance_limit', { provider: p.id, event_id: ev.eventId, trade_no: tradeNo });
      throw balanceLimitError();
    }
    // Money the provider took that credits nothing (a closed order, another checkout, a mismatch) is the operator's to
    // refund or reconcile: the event row alone is easy to miss. A second event of a paid order is not such money.
    if (ev.kind === 'paid' && r.outcome !== 'credited' && r.outcome !== 'not_pending:paid') {
      this.log.warn('topup.paid_not_credited', { provider: p.id, event_id: ev.eventId, trade_no: tradeNo, outcome: r.outcome });
    }
    // After commit: the balance caches refresh only once the credit is durable.
    if (r.credited) await this.bus.committed('user.changed', { userId: r.credited.userId });
    return { outcome: r.outcome, tradeNo };
  }

  /**
   * A refund or dispute. Most name a payment, not our trade no, and the order learns its payment id only from its
   * payment event, which may come later (delivered late, or refused with balance_limit). So when no order has the
   * payment, the provider's API is asked which order it belongs to (outside any transaction) and the event is applied
   * again by that trade no: to a pending order it is recorded (not_paid:…) and taken back at credit; a payment the API
   * says is not ours is recorded unknown_order at once. While the API cannot answer, or while too many other payments
   * are being asked (PaymentLookups), it is a retryable 409.
   */
  private async reverse(p: PaymentProvider, ev: Extract<PaymentEvent, { kind: 'reversal' }>): Promise<WebhookResult> {
    const paymentRef = ev.lookup.paymentRef ?? null;
    const ask = p.tradeNoOfPayment && paymentRef ? (ref: string) => p.tradeNoOfPayment!(ref) : null;
    let r = await this.reverseOnce(p, ev, ev.lookup, ask ? 'ask' : ev.awaitOrder ? 'retry' : 'record');
    if (r === 'ask') {
      let found: string | null;
      try {
        found = await this.lookups.tradeNo(`${p.id}:${paymentRef}`, () => ask!(paymentRef!));
      } catch (err) {
        this.log.warn('topup.reversal_order_unknown', { provider: p.id, event_id: ev.eventId, type: ev.type, payment_ref: paymentRef, error: (err as Error).message });
        throw orderNotYetKnown(p.id, paymentRef);
      }
      r = await this.reverseOnce(p, ev, { ...ev.lookup, tradeNo: found ?? ev.lookup.tradeNo }, 'record');
    }
    if (r === 'ask') throw new Error('unreachable: a recorded reversal asked again');
    if (r.duplicate) return { outcome: 'duplicate', tradeNo: null };
    // After commit, like a credit: admission (and in PostgreSQL mode every node's holds) reads the lowered balance.
    if (r.moved) await this.bus.committed('user.changed', { userId: r.moved.userId });
    return { outcome: r.outcome, tradeNo: r.tradeNo };
  }

  /** One unit of work for a reversal; `unknown` says what an event whose order is not found does. */
  private async reverseOnce(p: PaymentProvider, ev: Extract<PaymentEvent, { kind: 'reversal' }>, lookup: OrderLookup, unknown: 'ask' | 'retry' | 'record') {
    let tradeNo: string | null = null;
    try {
      const r = await this.ledger.reverseTopupOnce(
        { provider: p.id, eventId: ev.eventId, type: ev.type, at: nowSeconds(), lookup },
        (order, reversals, ownerExists) => {
          tradeNo = order?.provider === p.id ? order.tradeNo : null;
          // Thrown inside the unit of work, so the event id's claim is rolled back and the provider's retry runs afresh.
          if (!order || order.provider !== p.id) {
            if (unknown === 'ask') throw new AskProvider();
            if (unknown === 'retry') throw orderNotYetKnown(p.id, lookup.paymentRef);
          }
          // Money in another currency than the order's, before the payment event said what the customer paid in: the retry
          // after it can be measured (a presentment currency), or is recorded as a mismatch then.
          if (order?.provider === p.id && (order.status === 'pending' || order.status === 'expired') && inOrderUnits(order, ev.change.amount, ev.change.currency) === null) {
            throw currencyNotYetKnown(order.tradeNo, ev.change.currency);
          }
          return decideReversal(p.id, ev.type, lookup, ev.change, order, reversals, ownerExists);
        },
      );
      return { ...r, tradeNo };
    } catch (err) {
      if (err instanceof AskProvider) return 'ask' as const;
      if (err instanceof GatewayError && (err.code === ORDER_NOT_YET_KNOWN || err.code === CURRENCY_NOT_YET_KNOWN)) {
        this.log.warn('topup.reversal_order_unknown', { provider: p.id, event_id: ev.eventId, type: ev.type, payment_ref: lookup.paymentRef ?? null, reason: err.code });
      }
      throw err;
    }
  }
}

const CURRENCY_NOT_YET_KNOWN = 'currency_not_yet_known';
const ORDER_NOT_YET_KNOWN = 'order_not_yet_known';

/** Thrown inside a reversal's unit of work (rolling back the event's claim) when the provider's API is to be asked. */
class AskProvider extends Error {}

/**
 * A refund or dispute that names a payment no order has yet, and nobody could say whose it is (the provider's API did
 * not answer, or the provider has no such API and the event cannot name our trade no): its payment event may not have
 * been applied (delivered late, or refused with balance_limit), so the provider is asked to retry; nothing is recorded.
 */
function orderNotYetKnown(provider: string, paymentRef: string | null | undefined): GatewayError {
  return new GatewayError(409, ORDER_NOT_YET_KNOWN,
    `No ${provider} order has payment ${paymentRef ?? '(none)'} yet; nothing was recorded, and a retry after its payment event is applied`,
    { param: 'data.object.payment_intent' });
}

/**
 * A refund or dispute stating money in another currency than its order's, while the order's payment event (which says
 * what the customer paid in) has not been applied: retried like an unknown order, nothing recorded.
 */
function currencyNotYetKnown(tradeNo: string, currency: string | null): GatewayError {
  return new GatewayError(409, CURRENCY_NOT_YET_KNOWN,
    `Order ${tradeNo} is not paid yet, so ${currency ?? '(none)'} cannot be measured against its payment; nothing was recorded, and a retry after its payment event is applied`,
    { param: 'currency' });
}

/** The payment rules for one event and its order (pure: it runs inside the ledger's transaction). */
function decide(p: PaymentProvider, ev: Exclude<PaymentEvent, { kind: 'ignored' | 'reversal' }>, order: TopupOrderRow | undefined,
  ownerExists: boolean, reversals: TopupReversalRow[]): TopupDecision {
  if (ev.kind === 'noop') return { outcome: `noop:${ev.reason}` };
  if (!order || order.provider !== p.id) return { outcome: 'unknown_order' };
  // The checkout must be the one this order created, for a payment and for an expiry or failure alike. With no
  // checkout id yet the provider call that makes it is still in flight (or its answer was never stored), so the
  // customer has no URL to pay at, and the event is of some other checkout naming our trade no (a payment link's
  // client_reference_id is the payer's to set). Credited, it kept the order from taking its own checkout, whose
  // payment was then `not_pending:paid`; closed (expired, failed), it made that payment `not_pending:expired`.
  if (!order.providerRef || order.providerRef !== ev.providerRef) return { outcome: 'mismatch:checkout' };
  if (ev.kind !== 'paid') return { outcome: ev.kind, close: ev.kind };
  // Paid: the money must be exactly what the order asked for, or nothing is credited. The outcome
  // is recorded and the order stays pending for an operator to reconcile.
  if (ev.amount !== order.amount) return { outcome: `mismatch:amount ${ev.amount} != ${order.amount}` };
  if (ev.currency.toLowerCase() !== order.currency.toLowerCase()) return { outcome: `mismatch:currency ${ev.currency.toLowerCase()} != ${order.currency}` };
  // Discounted or underpaid although `amount` matches: the credit would exceed what was paid.
  if (ev.shortfall) return { outcome: `mismatch:${ev.shortfall}` };
  if (p.productId && ev.productId !== p.productId) return { outcome: `mismatch:product ${ev.productId ?? '(none)'}` };
  // The order's user was deleted after the checkout was made (its URL still works): the credit has nowhere
  // to go, and a retry cannot change that. Recorded, and the order stays pending for an operator to refund.
  if (!ownerExists) return { outcome: 'user_not_found' };
  // What the customer paid, kept only when it is not the order's amount and currency (a tax on top, another currency).
  const paid = ev.paid && (ev.paid.amount !== order.amount || ev.paid.currency.toLowerCase() !== order.currency.toLowerCase())
    ? { amount: ev.paid.amount, currency: ev.paid.currency.toLowerCase() } : undefined;
  // Nothing to measure refunds against: a presentment amount of 0 for a payment of the order's amount is not a payment.
  if (paid && paid.amount <= 0) return { outcome: `mismatch:paid ${paid.amount} ${paid.currency}` };
  return {
    outcome: 'credited', close: 'paid',
    credit: { amount: order.credit, note: `${p.id} ${ev.providerRef}`, paymentRef: ev.paymentRef, clawedBack: clawbackAtCredit(order, reversals, paid), paid },
  };
}
