import { and, count, desc, eq, lte, ne, notInArray, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { topupOrders } from '../schema';

export type TopupOrderRow = typeof topupOrders.$inferSelect;
export type NewTopupOrderRow = typeof topupOrders.$inferInsert;
export type TopupStatus = 'pending' | 'paid' | 'failed' | 'expired';

/**
 * The statuses an event may move an order out of. Only a pending order expires or fails. A payment may also close an
 * expired one: the provider took the money for the order's own checkout after we (TOPUP_PENDING_EXPIRY_SECONDS, a
 * removed provider) or it gave up on it (a Stripe async payment settles days later), so it is credited, once, as
 * the guard then no longer matches. A failed order is final: it never had a checkout (its payments are
 * `mismatch:checkout`), or its provider said the payment failed.
 */
export function closableFrom(to: Exclude<TopupStatus, 'pending'>): TopupStatus[] {
  return to === 'paid' ? ['pending', 'expired'] : ['pending'];
}

export interface TopupListFilter {
  userId?: number;
  status?: string;
  provider?: string;
  offset: number;
  limit: number;
}

/** Top-up orders: storage interface. */
export interface TopupOrdersStore {
  insert(row: NewTopupOrderRow): Promise<TopupOrderRow>;
  byTradeNo(tradeNo: string): Promise<TopupOrderRow | undefined>;
  /** Records the provider's checkout id and URL of a still-pending order. */
  attachCheckout(tradeNo: string, providerRef: string, checkoutUrl: string, at: number): Promise<TopupOrderRow | undefined>;
  /**
   * Moves an order out of 'pending'. The `status = 'pending'` guard makes the transition happen once:
   * a second caller (duplicate or concurrent event) gets undefined and must change nothing else.
   */
  closePending(tradeNo: string, to: Exclude<TopupStatus, 'pending'>, at: number): Promise<TopupOrderRow | undefined>;
  /**
   * Marks 'failed' the pending orders of `provider` created at or before `before` that never got a checkout id
   * (their create call's process died, or its last write failed); returns their trade nos. Guarded like
   * closePending, and by the empty checkout id, so an order that got its checkout meanwhile is left alone.
   */
  failUnstarted(provider: string, before: number, at: number): Promise<string[]>;
  /**
   * Marks 'expired' the pending orders of `provider` created at or before `before` that have a checkout id: a
   * provider that sends no expiry event (providerB) would leave them pending for ever. Guarded like closePending.
   * A paid event of the order's own checkout still credits an expired order (LedgerStore.creditTopupOnce).
   */
  expireStale(provider: string, before: number, at: number): Promise<string[]>;
  /**
   * Marks 'expired' every pending order of a provider not in `configured` (removed from the configuration, so no
   * event of it can reach the order any more); returns them with their provider. Guarded like closePending.
   */
  /**
   * Pending orders created at or before `before` whose provider is not in `configured` → expired. The age guard: during
   * a rolling change of the configuration a leader without a provider would otherwise expire the others' new orders.
   */
  expireOrphaned(configured: readonly string[], before: number, at: number): Promise<{ tradeNo: string; provider: string }[]>;
  list(f: TopupListFilter): Promise<{ items: TopupOrderRow[]; total: number }>;
}

/** Storage of top-up orders; knows SQL, no rules. */
export class TopupOrdersRepo implements TopupOrdersStore {
  constructor(private readonly db: Db) {}

  async insert(row: NewTopupOrderRow): Promise<TopupOrderRow> {
    return this.db.insert(topupOrders).values(row).returning().get();
  }

  async byTradeNo(tradeNo: string): Promise<TopupOrderRow | undefined> {
    return this.db.select().from(topupOrders).where(eq(topupOrders.tradeNo, tradeNo)).get();
  }

  /** Records the provider's checkout id and URL of a still-pending order. */
  async attachCheckout(tradeNo: string, providerRef: string, checkoutUrl: string, at: number): Promise<TopupOrderRow | undefined> {
    return this.db.update(topupOrders).set({ providerRef, checkoutUrl, updatedAt: at })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning().get();
  }

  /**
   * Moves an order out of 'pending'. The `status = 'pending'` guard makes the transition happen once:
   * a second caller (duplicate or concurrent event) gets undefined and must change nothing else.
   */
  async closePending(tradeNo: string, to: Exclude<TopupStatus, 'pending'>, at: number): Promise<TopupOrderRow | undefined> {
    return this.db.update(topupOrders)
      .set({ status: to, updatedAt: at, ...(to === 'paid' ? { paidAt: at } : {}) })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning().get();
  }

  async failUnstarted(provider: string, before: number, at: number): Promise<string[]> {
    return this.db.update(topupOrders).set({ status: 'failed', updatedAt: at })
      .where(and(eq(topupOrders.provider, provider), eq(topupOrders.providerRef, ''), eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)))
      .returning({ tradeNo: topupOrders.tradeNo }).all().map((r) => r.tradeNo);
  }

  async expireStale(provider: string, before: number, at: number): Promise<string[]> {
    return this.db.update(topupOrders).set({ status: 'expired', updatedAt: at })
      .where(and(eq(topupOrders.provider, provider), ne(topupOrders.providerRef, ''), eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)))
      .returning({ tradeNo: topupOrders.tradeNo }).all().map((r) => r.tradeNo);
  }

  async expireOrphaned(configured: readonly string[], before: number, at: number): Promise<{ tradeNo: string; provider: string }[]> {
    const conds: SQL[] = [eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)];
    if (configured.length) conds.push(notInArray(topupOrders.provider, [...configured]));
    return this.db.update(topupOrders).set({ status: 'expired', updatedAt: at }).where(and(...conds))
      .returning({ tradeNo: topupOrders.tradeNo, provider: topupOrders.provider }).all();
  }

  async list(f: TopupListFilter): Promise<{ items: TopupOrderRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(topupOrders.userId, f.userId));
    if (f.status) conds.push(eq(topupOrders.status, f.status));
    if (f.provider) conds.push(eq(topupOrders.provider, f.provider));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(topupOrders).where(where).orderBy(desc(topupOrders.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(topupOrders).where(where).get()!.n;
    return { items, total };
  }
}

