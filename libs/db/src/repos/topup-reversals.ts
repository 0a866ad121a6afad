/**
 * Refunds and disputes of paid top-ups, as the ledger's unit of work sees them (SQLite version; the
 * PostgreSQL twin is ../repos-pg/topup-reversals.ts). The payment rules live in @gw/payments: this
 * file finds the order, hands it and its reversal rows to `decide`, and writes what was decided.
 */
import { and, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { topupOrders, topupReversals, users, webhookEvents } from '../schema';
import type { LedgerEntryInput } from './ledger';
import type { TopupOrderRow } from './topup-orders';

export type TopupReversalRow = typeof topupReversals.$inferSelect;

/**
 * How an event names its order. Refund and dispute events name the payment (Stripe's PaymentIntent,
 * Creem's order) or the checkout, rarely our trade no; the first field that finds an order of the
 * event's provider wins. Empty values never match (orders credited before payment_ref existed hold '').
 */
export interface OrderLookup {
  tradeNo?: string | null;
  paymentRef?: string | null;
  checkoutRef?: string | null;
}

export interface ReversalEventInput {
  provider: string;
  eventId: string;
  type: string;
  at: number;
  lookup: OrderLookup;
}

/**
 * One reversal row as it should be after the event: its key, state, the money it holds back, and for
 * rows ordered by the provider's clock (Stripe's refunds) what was stated, when, and since when.
 */
export interface ReversalChange {
  key: string;
  state: string;
  amount: number;
  gross?: number;
  asOf?: number;
  since?: number;
}

/**
 * What the payment rules decide. With `reversal`, the row is written (and the `related` rows the same step
 * recomputed, e.g. the charge whose refund failed) and the order's clawed-back quota becomes `clawedBack`
 * (the difference is one ledger entry named after `reversal`: 'clawback' when it grows, 'reinstate' when
 * it shrinks). Without it, only the outcome is recorded.
 */
export type ReversalDecision =
  | { outcome: string }
  | { outcome: string; reversal: ReversalChange; related?: ReversalChange[]; clawedBack: number; note: string };

export type ReversalEventResult =
  | { duplicate: true }
  | { duplicate: false; outcome: string; moved: { userId: number; amount: number; balance: number } | null };

export type DecideReversal = (order: TopupOrderRow | undefined, reversals: TopupReversalRow[], ownerExists: boolean) => ReversalDecision;

/**
 * The ledger row of a change: names the order, and is unique per step of a reversal (its key, state and amount;
 * for a row ordered by the provider's clock, the stated amount and its time, since a running total may state
 * the same amount again after one of its refunds failed).
 */
export function reversalEntry(order: TopupOrderRow, r: ReversalChange, clawedBack: number, note: string, at: number): LedgerEntryInput | null {
  const delta = order.clawedBack - clawedBack;
  if (delta === 0) return null;
  const step = r.asOf ? `${r.gross ?? 0}@${r.asOf}` : String(r.amount);
  return {
    userId: order.userId, kind: delta < 0 ? 'clawback' : 'reinstate', amount: delta,
    ref: `${order.tradeNo}:${r.key}:${r.state}:${step}`, note, at,
  };
}

/** The columns of a reversal row as written by an event. */
export function reversalValues(tradeNo: string, r: ReversalChange, eventId: string, at: number) {
  return { tradeNo, key: r.key, state: r.state, amount: r.amount, gross: r.gross ?? 0, asOf: r.asOf ?? 0, since: r.since ?? 0, eventId, updatedAt: at };
}

/** Lookup order: trade no, then payment id, then checkout id; only orders of the event's provider. */
export function lookupSteps(l: OrderLookup) {
  return ([['tradeNo', l.tradeNo], ['paymentRef', l.paymentRef], ['providerRef', l.checkoutRef]] as const)
    .filter((s): s is readonly [typeof s[0], string] => typeof s[1] === 'string' && s[1] !== '');
}

/**
 * The unit of work on an open IMMEDIATE transaction (SQLite has one writer, so the order and its rows
 * cannot change between the read and the write). `write` is the ledger's entry writer on that transaction.
 */
export function reverseTopupSqlite(tx: Pick<Db, 'select' | 'insert' | 'update'>, e: ReversalEventInput, decide: DecideReversal,
  write: (entry: LedgerEntryInput) => number | null): ReversalEventResult {
  const claimed = tx.insert(webhookEvents)
    .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
    .onConflictDoNothing().returning({ id: webhookEvents.id }).get();
  if (!claimed) return { duplicate: true };
  let order: TopupOrderRow | undefined;
  for (const [col, v] of lookupSteps(e.lookup)) {
    order = tx.select().from(topupOrders).where(and(eq(topupOrders.provider, e.provider), eq(topupOrders[col], v))).get();
    if (order) break;
  }
  const reversals = order ? tx.select().from(topupReversals).where(eq(topupReversals.tradeNo, order.tradeNo)).all() : [];
  const ownerExists = !!order && !!tx.select({ id: users.id }).from(users).where(eq(users.id, order.userId)).get();
  const d = decide(order, reversals, ownerExists);
  let moved: { userId: number; amount: number; balance: number } | null = null;
  if ('reversal' in d) {
    if (!order) throw new Error('reverseTopupOnce: a reversal needs an order');
    const r = d.reversal;
    for (const c of [r, ...(d.related ?? [])]) {
      const { tradeNo: _t, key: _k, ...set } = reversalValues(order.tradeNo, c, e.eventId, e.at);
      tx.insert(topupReversals).values(reversalValues(order.tradeNo, c, e.eventId, e.at))
        .onConflictDoUpdate({ target: [topupReversals.tradeNo, topupReversals.key], set }).run();
    }
    const entry = reversalEntry(order, r, d.clawedBack, d.note, e.at);
    if (entry) {
      const balance = write(entry);
      // Each step of a reversal is written once (the rules only move a row forward): a second entry is a bug, so nothing is kept.
      if (balance === null) throw new Error(`ledger already holds ${entry.kind} ${entry.ref}`);
      tx.update(topupOrders).set({ clawedBack: d.clawedBack, updatedAt: e.at }).where(eq(topupOrders.tradeNo, order.tradeNo)).run();
      moved = { userId: order.userId, amount: entry.amount, balance };
    }
  }
  tx.update(webhookEvents).set({ outcome: d.outcome }).where(and(eq(webhookEvents.provider, e.provider), eq(webhookEvents.eventId, e.eventId))).run();
  return { duplicate: false, outcome: d.outcome, moved };
}
