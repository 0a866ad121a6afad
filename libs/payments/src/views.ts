/** The public shapes of orders and ledger entries (snake_case, as the management API speaks). */
import { Type, type Static } from '@sinclair/typebox';
import type { LedgerRow, TopupOrderRow } from '@gw/db';

export const TopupOrderView = Type.Object({
  id: Type.Integer(),
  trade_no: Type.String(),
  user_id: Type.Integer(),
  provider: Type.String({ description: 'providerA | providerB' }),
  amount: Type.Integer({ description: 'Money in minor units of `currency`' }),
  currency: Type.String(),
  credit: Type.Integer({ description: 'Quota units credited when paid' }),
  status: Type.String({ description: 'pending | paid | failed | expired' }),
  provider_ref: Type.String({ description: "The provider's checkout id" }),
  checkout_url: Type.String(),
  payment_ref: Type.String({ description: "The provider's payment id, kept when paid (providerA: PaymentIntent, providerB: order); '' before" }),
  clawed_back: Type.Integer({ description: 'Quota units taken back by refunds and disputes (net of won disputes)' }),
  paid_amount: Type.Integer({ description: "What the customer paid, in minor units of `paid_currency`, when the provider stated it apart from `amount` (a tax on top, a presentment currency); 0 otherwise" }),
  paid_currency: Type.String({ description: "The currency of `paid_amount`; '' when the customer paid `amount` in `currency`" }),
  created_at: Type.Integer(),
  updated_at: Type.Integer(),
  paid_at: Type.Union([Type.Integer(), Type.Null()]),
});
export type TopupOrderView = Static<typeof TopupOrderView>;

export function toOrderView(o: TopupOrderRow): TopupOrderView {
  return {
    id: o.id, trade_no: o.tradeNo, user_id: o.userId, provider: o.provider, amount: o.amount, currency: o.currency,
    credit: o.credit, status: o.status, provider_ref: o.providerRef, checkout_url: o.checkoutUrl,
    payment_ref: o.paymentRef, clawed_back: o.clawedBack, paid_amount: o.paidAmount, paid_currency: o.paidCurrency,
    created_at: o.createdAt, updated_at: o.updatedAt, paid_at: o.paidAt,
  };
}

/** What `POST /api/topup/` answers. */
export const TopupCreatedView = Type.Object({
  trade_no: Type.String(),
  checkout_url: Type.String({ description: "Send the customer here (the provider's hosted checkout)" }),
  amount: Type.Integer(),
  currency: Type.String(),
  credit: Type.Integer(),
  status: Type.String(),
});
export type TopupCreatedView = Static<typeof TopupCreatedView>;

export const LedgerEntryView = Type.Object({
  id: Type.Integer(),
  user_id: Type.Integer(),
  kind: Type.String({ description: 'topup | charge | refund | adjust | redeem | clawback (a top-up refunded or disputed: negative) | reinstate (a won dispute)' }),
  amount: Type.Integer({ description: 'Signed quota units' }),
  balance_after: Type.Integer(),
  ref: Type.String({ description: 'Trade no, request id, adjust:<uuid>, (redeem) the code id, or (clawback, reinstate) <trade no>:<reversal key>:<state>:<amount>' }),
  note: Type.String(),
  actor_id: Type.Union([Type.Integer(), Type.Null()], { description: 'Admin who made an adjustment' }),
  created_at: Type.Integer(),
});
export type LedgerEntryView = Static<typeof LedgerEntryView>;

export function toLedgerView(e: LedgerRow): LedgerEntryView {
  return {
    id: e.id, user_id: e.userId, kind: e.kind, amount: e.amount, balance_after: e.balanceAfter,
    ref: e.ref, note: e.note, actor_id: e.actorId, created_at: e.createdAt,
  };
}
