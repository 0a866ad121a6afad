import { and, count, desc, eq, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { topupOrders } from '../schema';

export type TopupOrderRow = typeof topupOrders.$inferSelect;
export type NewTopupOrderRow = typeof topupOrders.$inferInsert;
export type TopupStatus = 'pending' | 'paid' | 'failed' | 'expired';

/** A database handle or an open transaction: repos write inside the caller's transaction when given one. */
export type DbWriter = Pick<Db, 'select' | 'insert' | 'update'>;

export interface TopupListFilter {
  userId?: number;
  status?: string;
  provider?: string;
  offset: number;
  limit: number;
}

/** Storage of top-up orders; knows SQL, no rules. */
export class TopupOrdersRepo {
  constructor(private readonly db: Db) {}

  insert(row: NewTopupOrderRow): TopupOrderRow {
    return this.db.insert(topupOrders).values(row).returning().get();
  }

  byTradeNo(tradeNo: string, tx: DbWriter = this.db): TopupOrderRow | undefined {
    return tx.select().from(topupOrders).where(eq(topupOrders.tradeNo, tradeNo)).get();
  }

  /** Records the provider's checkout id and URL of a still-pending order. */
  attachCheckout(tradeNo: string, providerRef: string, checkoutUrl: string, at: number): TopupOrderRow | undefined {
    return this.db.update(topupOrders).set({ providerRef, checkoutUrl, updatedAt: at })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning().get();
  }

  /**
   * Moves an order out of 'pending'. The `status = 'pending'` guard makes the transition happen once:
   * a second caller (duplicate or concurrent event) gets undefined and must change nothing else.
   */
  closePending(tradeNo: string, to: Exclude<TopupStatus, 'pending'>, at: number, tx: DbWriter = this.db): TopupOrderRow | undefined {
    return tx.update(topupOrders)
      .set({ status: to, updatedAt: at, ...(to === 'paid' ? { paidAt: at } : {}) })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning().get();
  }

  list(f: TopupListFilter): { items: TopupOrderRow[]; total: number } {
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
