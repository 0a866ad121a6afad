import { and, count, desc, eq, lte, ne, notInArray, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { topupOrders } from '../schema-pg';
import type { NewTopupOrderRow, TopupListFilter, TopupOrderRow, TopupStatus } from '../repos/topup-orders';
import type { PgWriter } from './sql';

/** PostgreSQL twin of ../repos/topup-orders.ts (same methods, async). */
export class PgTopupOrdersRepo {
  constructor(private readonly db: PgDb) {}

  async insert(row: NewTopupOrderRow): Promise<TopupOrderRow> {
    return (await this.db.insert(topupOrders).values(row).returning())[0]!;
  }

  async byTradeNo(tradeNo: string, tx: PgWriter = this.db): Promise<TopupOrderRow | undefined> {
    return (await tx.select().from(topupOrders).where(eq(topupOrders.tradeNo, tradeNo)))[0];
  }

  async attachCheckout(tradeNo: string, providerRef: string, checkoutUrl: string, at: number): Promise<TopupOrderRow | undefined> {
    return (await this.db.update(topupOrders).set({ providerRef, checkoutUrl, updatedAt: at })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning())[0];
  }

  /** The `status = 'pending'` guard holds under READ COMMITTED too: a concurrent second UPDATE re-checks it after the first commits. */
  async closePending(tradeNo: string, to: Exclude<TopupStatus, 'pending'>, at: number, tx: PgWriter = this.db): Promise<TopupOrderRow | undefined> {
    return (await tx.update(topupOrders)
      .set({ status: to, updatedAt: at, ...(to === 'paid' ? { paidAt: at } : {}) })
      .where(and(eq(topupOrders.tradeNo, tradeNo), eq(topupOrders.status, 'pending'))).returning())[0];
  }

  /** By the (provider, provider_ref) index; the guards are rechecked on a row a concurrent write changed (READ COMMITTED). */
  async failUnstarted(provider: string, before: number, at: number): Promise<string[]> {
    return (await this.db.update(topupOrders).set({ status: 'failed', updatedAt: at })
      .where(and(eq(topupOrders.provider, provider), eq(topupOrders.providerRef, ''), eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)))
      .returning({ tradeNo: topupOrders.tradeNo })).map((r) => r.tradeNo);
  }

  async expireStale(provider: string, before: number, at: number): Promise<string[]> {
    return (await this.db.update(topupOrders).set({ status: 'expired', updatedAt: at })
      .where(and(eq(topupOrders.provider, provider), ne(topupOrders.providerRef, ''), eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)))
      .returning({ tradeNo: topupOrders.tradeNo })).map((r) => r.tradeNo);
  }

  async expireOrphaned(configured: readonly string[], before: number, at: number): Promise<{ tradeNo: string; provider: string }[]> {
    const conds: SQL[] = [eq(topupOrders.status, 'pending'), lte(topupOrders.createdAt, before)];
    if (configured.length) conds.push(notInArray(topupOrders.provider, [...configured]));
    return this.db.update(topupOrders).set({ status: 'expired', updatedAt: at }).where(and(...conds))
      .returning({ tradeNo: topupOrders.tradeNo, provider: topupOrders.provider });
  }

  async list(f: TopupListFilter): Promise<{ items: TopupOrderRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(topupOrders.userId, f.userId));
    if (f.status) conds.push(eq(topupOrders.status, f.status));
    if (f.provider) conds.push(eq(topupOrders.provider, f.provider));
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(topupOrders).where(where).orderBy(desc(topupOrders.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(topupOrders).where(where),
    ]);
    return { items, total: t!.n };
  }
}
