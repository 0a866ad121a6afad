/**
 * The claw-back rules for refunds and disputes of paid top-ups (pure: they run inside the ledger's
 * transaction, with the order locked). The state is one row per reversal of an order (its key, state and
 * the money it holds back now); an event may only move its row forward, so a repeated, reordered or
 * concurrent event changes nothing a second time:
 *   - a refund stated as a running total (Stripe's `amount_refunded`) keeps the larger total;
 *   - a refund stated alone (Creem's `refund_amount`, keyed by the refund id) counts once;
 *   - a dispute goes absent → withdrawn → reinstated, or absent → reinstated (a win that arrived first:
 *     the late withdrawal then takes nothing).
 * The quota taken back is always recomputed from all of the order's rows (see clawbackShare), never
 * added up from events, so the total cannot pass what the order credited.
 */
import type { OrderLookup, ReversalChange, ReversalDecision, TopupOrderRow, TopupReversalRow } from '@gw/db';
import type { ReversalRequest } from './provider';

/**
 * The quota to take back when `taken` of the order's `amount` (money) is refunded or held by disputes:
 * the same share of `credit`, rounded down, with `taken` capped at `amount`, so a full refund takes back
 * exactly the credit and the total never exceeds it. BigInt: credit × amount can pass 2^53.
 */
export function clawbackShare(credit: number, amount: number, taken: number): number {
  if (amount <= 0 || taken <= 0 || credit <= 0) return 0;
  return Number((BigInt(credit) * BigInt(Math.min(taken, amount))) / BigInt(amount));
}

/** The row after the event, or why the event changes nothing. */
export function nextReversal(cur: TopupReversalRow | undefined, c: ReversalRequest): ReversalChange | { noop: string } {
  if (c.action === 'refund') {
    if (cur && (!c.cumulative || cur.amount >= c.amount)) return { noop: `refund already counted (${cur.amount})` };
    return { key: c.key, state: 'refunded', amount: c.amount };
  }
  if (c.action === 'withdrawn') {
    if (cur) return { noop: `dispute already ${cur.state}` };
    return { key: c.key, state: 'withdrawn', amount: c.amount };
  }
  if (cur?.state === 'reinstated') return { noop: 'dispute already reinstated' };
  return { key: c.key, state: 'reinstated', amount: 0 };
}

/** Money held back by an order's reversals, with one row replaced by its next state. */
export function takenWith(reversals: TopupReversalRow[], next: ReversalChange): number {
  return reversals.reduce((s, r) => s + (r.key === next.key ? 0 : r.amount), next.amount);
}

const OUTCOME = { refund: 'refunded', withdrawn: 'dispute_withdrawn', reinstated: 'dispute_reinstated' } as const;

/**
 * One reversal event against its order. Outcomes: refunded | dispute_withdrawn | dispute_reinstated (the
 * row moved; the balance moved by the difference, if any), noop:<why> (already counted), unknown_order,
 * mismatch:payment | mismatch:checkout | mismatch:currency …, not_paid:<status> (recorded; nothing was credited
 * to take back, and a payment confirmed later is credited net of it), user_not_found.
 */
export function decideReversal(providerId: string, type: string, lookup: OrderLookup, c: ReversalRequest, order: TopupOrderRow | undefined,
  reversals: TopupReversalRow[], ownerExists: boolean): ReversalDecision {
  if (!order || order.provider !== providerId) return { outcome: 'unknown_order' };
  // Found by the trade no, the event's other ids must still be this order's (once the order knows them), as a paid
  // event's checkout must be: ids that disagree are an operator's question, never a debit.
  if (order.paymentRef && lookup.paymentRef && order.paymentRef !== lookup.paymentRef) return { outcome: 'mismatch:payment' };
  if (order.providerRef && lookup.checkoutRef && order.providerRef !== lookup.checkoutRef) return { outcome: 'mismatch:checkout' };
  if (c.currency && c.currency.toLowerCase() !== order.currency.toLowerCase()) return { outcome: `mismatch:currency ${c.currency.toLowerCase()} != ${order.currency}` };
  const next = nextReversal(reversals.find((r) => r.key === c.key), c);
  if ('noop' in next) return { outcome: `noop:${next.noop}` };
  const note = `${providerId} ${type} ${c.key}`;
  if (order.status !== 'paid') return { outcome: `not_paid:${order.status}`, reversal: next, clawedBack: order.clawedBack, note };
  // The user was deleted: there is no balance to take from (an operator follows up with the customer).
  if (!ownerExists) return { outcome: 'user_not_found' };
  return { outcome: OUTCOME[c.action], reversal: next, clawedBack: clawbackShare(order.credit, order.amount, takenWith(reversals, next)), note };
}

/** At credit time: what reversals recorded before the payment was confirmed take straight back. */
export function clawbackAtCredit(order: TopupOrderRow, reversals: TopupReversalRow[]): number {
  return clawbackShare(order.credit, order.amount, reversals.reduce((s, r) => s + r.amount, 0));
}
