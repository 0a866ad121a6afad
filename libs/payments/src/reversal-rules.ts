/**
 * The claw-back rules for refunds and disputes of paid top-ups (pure: they run inside the ledger's
 * transaction, with the order locked). The state is one row per reversal of an order (its key, state and
 * the money it holds back now); an event may only move its row forward, so a repeated, reordered or
 * concurrent event changes nothing a second time:
 *   - a refund stated as a running total (Stripe's `amount_refunded`) keeps the latest statement by the
 *     provider's clock (the larger total within one second), and holds it less the refunds it included that
 *     failed later (see chargeHeld);
 *   - a refund stated alone (Creem's `refund_amount`, keyed by the refund id) counts once;
 *   - a failed Stripe refund is recorded once and gives back its share of the charge's latest total;
 *   - a dispute goes absent → withdrawn → reinstated, or absent → reinstated (a win that arrived first:
 *     the late withdrawal then takes nothing).
 * The quota taken back is always recomputed from all of the order's rows (see clawbackShare), never
 * added up from events, so the total cannot pass what the order credited, and the rows depend only on
 * which events arrived, not on their order.
 */
import type { OrderLookup, ReversalChange, ReversalDecision, TopupOrderRow, TopupReversalRow } from '@gw/db';
import type { ReversalRequest } from './provider';

/**
 * The quota to take back when `taken` of the payment's `amount` (money; see paymentBase) is refunded or held by disputes:
 * the same share of `credit`, rounded down, with `taken` capped at `amount`, so a full refund takes back
 * exactly the credit and the total never exceeds it. BigInt: credit × amount can pass 2^53.
 */
export function clawbackShare(credit: number, amount: number, taken: number): number {
  if (amount <= 0 || taken <= 0 || credit <= 0) return 0;
  return Number((BigInt(credit) * BigInt(Math.min(taken, amount))) / BigInt(amount));
}

const sameCurrency = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/**
 * The money an order's reversal rows are measured against: what the customer paid when it is in the order's currency
 * (providerB with a tax on top: its refunds and disputes include the tax), else the order's amount.
 */
export function paymentBase(order: Pick<TopupOrderRow, 'amount' | 'currency' | 'paidAmount' | 'paidCurrency'>): number {
  return order.paidAmount > 0 && sameCurrency(order.paidCurrency, order.currency) ? order.paidAmount : order.amount;
}

/**
 * An event's money in the units of the order's rows: as stated in the order's currency (or none stated); stated in the
 * currency the customer paid in (a presentment currency), the same share of the order's amount, rounded down (the
 * user's favour, by less than one minor unit); null in any other currency (nothing to measure it against).
 */
export function inOrderUnits(order: Pick<TopupOrderRow, 'amount' | 'currency' | 'paidAmount' | 'paidCurrency'>, amount: number, currency: string | null): number | null {
  if (!currency || sameCurrency(currency, order.currency)) return amount;
  if (order.paidAmount > 0 && order.paidCurrency && sameCurrency(currency, order.paidCurrency)) {
    return Number((BigInt(amount) * BigInt(order.amount)) / BigInt(order.paidAmount));
  }
  return null;
}

/** A charge's failure rows are keyed under it. */
export const failedKey = (chargeKey: string, refundId: string) => `${chargeKey}:failed:${refundId}`;

/**
 * What a charge's refunds hold back: its latest running total less the failed refunds that total included.
 * Stripe states `amount_refunded` net of the refunds failed so far, so a total stated at time t includes a
 * refund created at or before t that failed after t, and no other failed one. Within one second the order is
 * unknown, and the safe side is taken: a failure in the same second as the total is taken to be in it already
 * (nothing is given back that may not have been taken). Never below 0 nor above the stated total.
 */
export function chargeHeld(charge: { gross: number; asOf: number } | undefined, failures: Array<{ gross: number; asOf: number; since: number }>): number {
  if (!charge) return 0;
  const failedSince = failures.reduce((s, f) => s + (f.since <= charge.asOf && charge.asOf < f.asOf ? f.gross : 0), 0);
  return Math.max(0, charge.gross - failedSince);
}

/**
 * How far Stripe's clock may run ahead of ours: the webhook signature's default tolerance already assumes the two
 * agree within it.
 */
const CLOCK_SKEW_SECONDS = 300;

/**
 * A charge counted before statement times were kept (the migration leaves as_of 0) was stated no later than when it
 * was counted (updated_at, our clock): a smaller total created before then may be an older event delivered late
 * (Stripe retries a failed delivery for days, e.g. across the upgrade), so, as before, the larger total is kept.
 */
function legacyMayBeStale(cur: TopupReversalRow, amount: number, asOf: number): boolean {
  return cur.asOf === 0 && cur.gross > amount && asOf <= cur.updatedAt + CLOCK_SKEW_SECONDS;
}

const failuresOf = (reversals: TopupReversalRow[], chargeKey: string) => reversals.filter((r) => r.key.startsWith(`${chargeKey}:failed:`));

/** The rows after the event (the first is the one the event names), or why the event changes nothing. */
export function nextReversal(reversals: TopupReversalRow[], c: ReversalRequest): ReversalChange[] | { noop: string } {
  const cur = reversals.find((r) => r.key === c.key);
  if (c.action === 'refund' && c.cumulative) {
    const asOf = c.asOf ?? 0;
    if (cur && (cur.asOf > asOf || (cur.asOf === asOf && cur.gross >= c.amount) || legacyMayBeStale(cur, c.amount, asOf))) {
      return { noop: cur.gross >= c.amount ? `refund already counted (${cur.gross})` : `refund total ${c.amount} is older than the counted ${cur.gross}` };
    }
    const next = { gross: c.amount, asOf };
    return [{ key: c.key, state: 'refunded', amount: chargeHeld(next, failuresOf(reversals, c.key)), ...next }];
  }
  if (c.action === 'refund') {
    if (cur) return { noop: `refund already counted (${cur.amount})` };
    // As a dispute's: counted as 0, a later statement of the same refund with its real amount would be a no-op.
    if (c.amount === 0) return { noop: 'refund of 0' };
    return [{ key: c.key, state: 'refunded', amount: c.amount }];
  }
  if (c.action === 'refund_failed') {
    const key = failedKey(c.key, c.refundId ?? '');
    // A Refund carries no failure time, and every later update of a failed refund (its metadata, say) is another event
    // stating `failed`: the failure happened no later than the earliest of them. Dated by a later one, it would be taken
    // out of totals stated after it, which are already net of it (given back twice), so an earlier one moves it back.
    const known = reversals.find((r) => r.key === key);
    if (known && known.asOf <= (c.asOf ?? 0)) return { noop: 'refund already failed' };
    const failure = { key, state: 'failed', amount: 0, gross: c.amount, asOf: c.asOf ?? 0, since: c.since ?? 0 };
    // Before the charge's total arrives there is nothing to give back; the total, when it comes, is held net of this.
    if (!cur) return [failure];
    const failures = [...failuresOf(reversals, c.key).filter((r) => r.key !== key), failure];
    return [failure, { key: cur.key, state: cur.state, amount: chargeHeld(cur, failures), gross: cur.gross, asOf: cur.asOf }];
  }
  if (c.action === 'withdrawn') {
    // One withdrawal per dispute: a resend under a new event id, or one stating another amount, moves nothing again.
    if (cur) return { noop: `dispute already ${cur.state}${cur.state === 'withdrawn' && cur.amount !== c.amount ? ` (${cur.amount}; this event states ${c.amount})` : ''}` };
    // Recorded as withdrawn, 0 would hold nothing and turn the dispute's real withdrawal into a no-op.
    if (c.amount === 0) return { noop: 'dispute withdrew 0' };
    return [{ key: c.key, state: 'withdrawn', amount: c.amount }];
  }
  if (cur?.state === 'reinstated') return { noop: 'dispute already reinstated' };
  return [{ key: c.key, state: 'reinstated', amount: 0 }];
}

/** Money held back by an order's reversals, with some rows replaced or added by their next state. */
export function takenWith(reversals: TopupReversalRow[], next: ReversalChange[]): number {
  const kept = reversals.filter((r) => !next.some((n) => n.key === r.key));
  return [...kept, ...next].reduce((s, r) => s + r.amount, 0);
}

const OUTCOME = { refund: 'refunded', refund_failed: 'refund_failed', withdrawn: 'dispute_withdrawn', reinstated: 'dispute_reinstated' } as const;

/**
 * One reversal event against its order. Outcomes: refunded | refund_failed | dispute_withdrawn | dispute_reinstated (the
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
  // An event naming a checkout needs the order to have that one. With no checkout id yet (its create call in flight) the
  // customer has no URL, so it is another checkout naming our trade no (Creem's request_id): recorded as not_paid, its
  // refund was taken back from the credit of the order's own payment when that came.
  if (lookup.checkoutRef && order.providerRef !== lookup.checkoutRef) return { outcome: 'mismatch:checkout' };
  const amount = inOrderUnits(order, c.amount, c.currency);
  if (amount === null) return { outcome: `mismatch:currency ${c.currency!.toLowerCase()} != ${order.currency}` };
  c = { ...c, amount };
  const next = nextReversal(reversals, c);
  if ('noop' in next) return { outcome: `noop:${next.noop}` };
  const [reversal, ...related] = next as [ReversalChange, ...ReversalChange[]];
  const note = `${providerId} ${type} ${reversal.key}`;
  if (order.status !== 'paid') return { outcome: `not_paid:${order.status}`, reversal, related, clawedBack: order.clawedBack, note };
  // The user was deleted: there is no balance to take from (an operator follows up with the customer).
  if (!ownerExists) return { outcome: 'user_not_found' };
  const clawedBack = clawbackShare(order.credit, paymentBase(order), takenWith(reversals, next));
  // A later running total that states the same amount only moves the row's time: nothing was counted anew.
  const same = c.cumulative && reversals.some((r) => r.key === c.key && r.gross === c.amount) && clawedBack === order.clawedBack;
  return { outcome: same ? `noop:refund already counted (${c.amount})` : OUTCOME[c.action], reversal, related, clawedBack, note };
}

/**
 * At credit time: what reversals recorded before the payment was confirmed take straight back, measured against what
 * the customer paid (`paid`, as the credit keeps it).
 */
export function clawbackAtCredit(order: TopupOrderRow, reversals: TopupReversalRow[], paid?: { amount: number; currency: string }): number {
  const base = paymentBase({ ...order, paidAmount: paid?.amount ?? 0, paidCurrency: paid?.currency ?? '' });
  return clawbackShare(order.credit, base, reversals.reduce((s, r) => s + r.amount, 0));
}
