/**
 * PostgreSQL twin of ../repos/topup-reversals.ts. READ COMMITTED lets two events of one order (two
 * partial refunds, a refund and a dispute, on two nodes) both read the order's rows before either
 * writes, so the order row is locked (`FOR UPDATE`) before its reversal rows are read: the second waits
 * for the first to commit and then reads what it wrote (each statement takes a fresh snapshot).
 */
import { and, eq } from 'drizzle-orm';
import { topupOrders, topupReversals, users, webhookEvents } from '../schema-pg';
import type { LedgerEntryInput } from '../repos/ledger';
import type { TopupOrderRow } from '../repos/topup-orders';
import { lookupSteps, reversalEntry, reversalValues, type DecideReversal, type ReversalEventInput, type ReversalEventResult } from '../repos/topup-reversals';
import type { PgWriter } from './sql';

export async function reverseTopupPg(tx: PgWriter, e: ReversalEventInput, decide: DecideReversal,
  apply: (entry: LedgerEntryInput) => Promise<number | null>): Promise<ReversalEventResult> {
  // A concurrent delivery of the same event id waits on the unique index until this transaction ends.
  const claimed = await tx.insert(webhookEvents)
    .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
    .onConflictDoNothing().returning({ id: webhookEvents.id });
  if (!claimed.length) return { duplicate: true };
  let order: TopupOrderRow | undefined;
  for (const [col, v] of lookupSteps(e.lookup)) {
    [order] = await tx.select().from(topupOrders).where(and(eq(topupOrders.provider, e.provider), eq(topupOrders[col], v))).for('update');
    if (order) break;
  }
  const reversals = order ? await tx.select().from(topupReversals).where(eq(topupReversals.tradeNo, order.tradeNo)) : [];
  const ownerExists = !!order && (await tx.select({ id: users.id }).from(users).where(eq(users.id, order.userId))).length > 0;
  const d = decide(order, reversals, ownerExists);
  let moved: { userId: number; amount: number; balance: number } | null = null;
  if ('reversal' in d) {
    if (!order) throw new Error('reverseTopupOnce: a reversal needs an order');
    const r = d.reversal;
    // The row lock serialises this: the upserts never race another writer of the same (trade no, key).
    for (const c of [r, ...(d.related ?? [])]) {
      const { tradeNo: _t, key: _k, ...set } = reversalValues(order.tradeNo, c, e.eventId, e.at);
      await tx.insert(topupReversals).values(reversalValues(order.tradeNo, c, e.eventId, e.at))
        .onConflictDoUpdate({ target: [topupReversals.tradeNo, topupReversals.key], set });
    }
    const entry = reversalEntry(order, r, d.clawedBack, d.note, e.at);
    if (entry) {
      const balance = await apply(entry);
      if (balance === null) throw new Error(`ledger already holds ${entry.kind} ${entry.ref}`);
      await tx.update(topupOrders).set({ clawedBack: d.clawedBack, updatedAt: e.at }).where(eq(topupOrders.tradeNo, order.tradeNo));
      moved = { userId: order.userId, amount: entry.amount, balance };
    }
  }
  await tx.update(webhookEvents).set({ outcome: d.outcome }).where(and(eq(webhookEvents.provider, e.provider), eq(webhookEvents.eventId, e.eventId)));
  return { duplicate: false, outcome: d.outcome, moved };
}
