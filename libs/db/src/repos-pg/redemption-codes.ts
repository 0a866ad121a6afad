import { and, count, desc, eq, gt, sql, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { redemptionCodes } from '../schema-pg';
import type { NewRedemptionCodeRow, RedemptionBatchRow, RedemptionCodeRow, RedemptionListFilter } from '../repos/redemption-codes';
import type { PgWriter } from './sql';

/** PostgreSQL twin of ../repos/redemption-codes.ts (same methods, async). */
export class PgRedemptionCodesRepo {
  constructor(private readonly db: PgDb) {}

  /**
   * Inserts a batch in one transaction: all codes exist or none; false (nothing written) when the
   * batch name exists. SQLite serialises the check-then-insert with BEGIN IMMEDIATE; here a
   * transaction-scoped advisory lock on the batch name does, so two concurrent creations of the same
   * name cannot both pass the check.
   */
  async insertBatch(rows: NewRedemptionCodeRow[]): Promise<boolean> {
    const batch = rows[0]?.batch;
    if (batch === undefined) return true;
    return this.db.transaction(async (tx) => {
      await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${'gw-redemption-batch:' + batch}))`);
      const [dup] = await tx.select({ id: redemptionCodes.id }).from(redemptionCodes).where(eq(redemptionCodes.batch, batch)).limit(1);
      if (dup) return false;
      if (rows.length) await tx.insert(redemptionCodes).values(rows);
      return true;
    });
  }

  async byHash(codeHash: string, tx: PgWriter = this.db): Promise<RedemptionCodeRow | undefined> {
    return (await tx.select().from(redemptionCodes).where(eq(redemptionCodes.codeHash, codeHash)))[0];
  }

  /** The guard in the WHERE clause is re-checked by a concurrent UPDATE after the first commits: one claim wins. */
  async claim(codeHash: string, userId: number, at: number, tx: PgWriter = this.db): Promise<RedemptionCodeRow | undefined> {
    return (await tx.update(redemptionCodes).set({ status: 'redeemed', redeemedBy: userId, redeemedAt: at })
      .where(and(eq(redemptionCodes.codeHash, codeHash), eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, at)))
      .returning())[0];
  }

  async revokeBatch(batch: string): Promise<number> {
    return (await this.db.update(redemptionCodes).set({ status: 'revoked' })
      .where(and(eq(redemptionCodes.batch, batch), eq(redemptionCodes.status, 'unused'))).returning({ id: redemptionCodes.id })).length;
  }

  async list(f: RedemptionListFilter): Promise<{ items: RedemptionCodeRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.batch !== undefined) conds.push(eq(redemptionCodes.batch, f.batch));
    if (f.status === 'unused') conds.push(eq(redemptionCodes.status, 'unused'), gt(redemptionCodes.expiresAt, f.at));
    else if (f.status === 'expired') conds.push(eq(redemptionCodes.status, 'unused'), sql`${redemptionCodes.expiresAt} <= ${f.at}`);
    else if (f.status) conds.push(eq(redemptionCodes.status, f.status));
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(redemptionCodes).where(where).orderBy(desc(redemptionCodes.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(redemptionCodes).where(where),
    ]);
    return { items, total: t!.n };
  }

  /** One row per batch with its counts by status, newest batch first (PG's sum() is numeric: mapped to numbers). */
  async batches(at: number, offset: number, limit: number): Promise<{ items: RedemptionBatchRow[]; total: number }> {
    const c = redemptionCodes;
    const live = sql`${c.status} = 'unused' and ${c.expiresAt} > ${at}`;
    const [items, [t]] = await Promise.all([
      this.db.select({
        batch: c.batch,
        quota: sql<number>`max(${c.quota})`.mapWith(Number),
        total: count(),
        unused: sql<number>`sum(case when ${live} then 1 else 0 end)`.mapWith(Number),
        redeemed: sql<number>`sum(case when ${c.status} = 'redeemed' then 1 else 0 end)`.mapWith(Number),
        revoked: sql<number>`sum(case when ${c.status} = 'revoked' then 1 else 0 end)`.mapWith(Number),
        expired: sql<number>`sum(case when ${c.status} = 'unused' and ${c.expiresAt} <= ${at} then 1 else 0 end)`.mapWith(Number),
        createdAt: sql<number>`min(${c.createdAt})`.mapWith(Number),
        expiresAt: sql<number>`max(${c.expiresAt})`.mapWith(Number),
      }).from(c).groupBy(c.batch).orderBy(desc(sql`max(${c.id})`)).limit(limit).offset(offset),
      this.db.select({ n: sql<number>`count(distinct ${c.batch})`.mapWith(Number) }).from(c),
    ]);
    return { items, total: t!.n };
  }

  async batchExists(batch: string): Promise<boolean> {
    return (await this.db.select({ id: redemptionCodes.id }).from(redemptionCodes).where(eq(redemptionCodes.batch, batch)).limit(1)).length > 0;
  }
}
