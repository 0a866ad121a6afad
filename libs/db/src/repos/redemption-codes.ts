import { and, count, desc, eq, gt, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { redemptionCodes } from '../schema';

export type RedemptionCodeRow = typeof redemptionCodes.$inferSelect;
export type NewRedemptionCodeRow = typeof redemptionCodes.$inferInsert;
/** What a code reads as: the stored status, except an unused code past its expiry reads 'expired'. */
export type RedemptionStatus = 'unused' | 'redeemed' | 'expired' | 'revoked';

export interface RedemptionListFilter {
  batch?: string;
  status?: RedemptionStatus;
  at: number;
  offset: number;
  limit: number;
}

export interface RedemptionBatchRow {
  batch: string;
  quota: number;
  total: number;
  unused: number;
  redeemed: number;
  revoked: number;
  expired: number;
  createdAt: number;
  expiresAt: number;
}

/** Redemption codes: storage interface. */
export interface RedemptionCodesStore {
  /**
   * Inserts a batch in one IMMEDIATE transaction: all codes exist or none. Returns false (nothing
   * written) when codes with this batch name already exist.
   */
  insertBatch(rows: NewRedemptionCodeRow[]): Promise<boolean>;
  byHash(codeHash: string): Promise<RedemptionCodeRow | undefined>;
  /**
   * Marks a code redeemed when it is still unused and unexpired. The guard in the WHERE clause makes
   * the transition happen once: a concurrent or later caller gets undefined and must credit nothing.
   */
  claim(codeHash: string, userId: number, at: number): Promise<RedemptionCodeRow | undefined>;
  /** Revokes the unused codes of a batch (expired ones included: they can never be redeemed anyway). */
  revokeBatch(batch: string): Promise<number>;
  list(f: RedemptionListFilter): Promise<{ items: RedemptionCodeRow[]; total: number }>;
  /** One row per batch with its counts by status, newest batch first. */
  batches(at: number, offset: number, limit: number): Promise<{ items: RedemptionBatchRow[]; total: number }>;
  /** True when any code carries this batch name (names are unique per creation call). */
  batchExists(batch: string): Promise<boolean>;
}

/** Storage of redemption codes; knows SQL, no rules. */
export class RedemptionCodesRepo implements RedemptionCodesStore {
  constructor(private readonly db: Db) {}

  /**
   * Inserts a batch in one IMMEDIATE transaction: all codes exist or none. Returns false (nothing
   * written) when codes with this batch name already exist.
   */
  async insertBatch(rows: NewRedemptionCodeRow[]): Promise<boolean> {
    return this.db.transaction((tx) => {
      const batch = rows[0]?.batch;
      if (batch === undefined) return true;
      if (tx.select({ id: redemptionCodes.id }).from(redemptionCodes).where(eq(redemptionCodes.batch, batch)).limit(1).get()) return false;
      for (const r of rows) tx.insert(redemptionCodes).values(r).run();
      return true;
    }, { behavior: 'immediate' });
  }

  async byHash(codeHash: string): Promise<RedemptionCodeRow | undefined> {
    return this.db.select().from(redemptionCodes).where(eq(redemptionCodes.codeHash, codeHash)).get();
  }

  /**
   * Marks a code redeemed when it is still unused and unexpired. The guard in the WHERE clause makes
   * the transition happen once: a concurrent or later caller gets undefined and must credit nothing.
   */
  async claim(codeHash: string, userId: number, at: number): Promise<RedemptionCodeRow | undefined> {
    return this.db.update(redemptionCodes).set({ status: 'redeemed', redeemedBy: userId, redeemedAt: at })
      .where(and(eq(redemptionCodes.codeHash, codeHash), eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, at)))
      .returning().get();
  }

  /** Revokes the unused codes of a batch (expired ones included: they can never be redeemed anyway). */
  async revokeBatch(batch: string): Promise<number> {
    return this.db.update(redemptionCodes).set({ status: 'revoked' })
      .where(and(eq(redemptionCodes.batch, batch), eq(redemptionCodes.status, 'unused'))).returning({ id: redemptionCodes.id }).all().length;
  }

  async list(f: RedemptionListFilter): Promise<{ items: RedemptionCodeRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.batch !== undefined) conds.push(eq(redemptionCodes.batch, f.batch));
    if (f.status === 'unused') conds.push(eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, f.at));
    else if (f.status === 'expired') conds.push(eq(redemptionCodes.status, 'unused'), sql`${redemptionCodes.expiresAt} <= ${f.at}`);
    else if (f.status) conds.push(eq(redemptionCodes.status, f.status));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(redemptionCodes).where(where).orderBy(desc(redemptionCodes.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(redemptionCodes).where(where).get()!.n;
    return { items, total };
  }

  /** One row per batch with its counts by status, newest batch first. */
  async batches(at: number, offset: number, limit: number): Promise<{ items: RedemptionBatchRow[]; total: number }> {
    const c = redemptionCodes;
    const live = sql`${c.status} = 'unused' and ${c.expiresAt} > ${at}`;
    const items = this.db.select({
      batch: c.batch,
      quota: sql<number>`max(${c.quota})`.mapWith(Number),
      total: count(),
      unused: sql<number>`sum(case when ${live} then 1 else 0 end)`.mapWith(Number),
      redeemed: sql<number>`sum(case when ${c.status} = 'redeemed' then 1 else 0 end)`.mapWith(Number),
      revoked: sql<number>`sum(case when ${c.status} = 'revoked' then 1 else 0 end)`.mapWith(Number),
      expired: sql<number>`sum(case when ${c.status} = 'unused' and ${c.expiresAt} <= ${at} then 1 else 0 end)`.mapWith(Number),
      createdAt: sql<number>`min(${c.createdAt})`.mapWith(Number),
      expiresAt: sql<number>`max(${c.expiresAt})`.mapWith(Number),
    }).from(c).groupBy(c.batch).orderBy(desc(sql`max(${c.id})`)).limit(limit).offset(offset).all();
    const total = this.db.select({ n: sql<number>`count(distinct ${c.batch})`.mapWith(Number) }).from(c).get()!.n;
    return { items, total };
  }

  /** True when any code carries this batch name (names are unique per creation call). */
  async batchExists(batch: string): Promise<boolean> {
    return !!this.db.select({ id: redemptionCodes.id }).from(redemptionCodes).where(eq(redemptionCodes.batch, batch)).limit(1).get();
  }
}
