import { and, count, desc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { apiKeys, deletedApiKeys, usageLogs, users } from '../schema-pg';
import { deletedKeyChunks, type NewUsageLogRow, type UsageLogFilter, type UsageLogRow, type UsageLogWhere } from '../repos/usage-logs';
import type { PgWriter } from './sql';
import { MAX_COUNTER } from '@gw/core';

/** Counters (used_quota, request_count) stop at 2^53 − 1: past it a reader would round them (README: Metering invariants). */
const COUNTER_CAP = sql.raw(String(MAX_COUNTER));
import { beforeCondition, logConditionsOf } from '../repos/usage-stats-sql';

/** PostgreSQL twin of withKeyOwner (../repos/usage-logs.ts): `f` with its key's owner, live or deleted, as its user. */
export async function pgWithKeyOwner<T extends { userId?: number; apiKeyId?: number }>(db: PgDb, f: T): Promise<T> {
  if (f.userId !== undefined || f.apiKeyId === undefined) return f;
  const id = f.apiKeyId;
  const owner = (await db.select({ u: apiKeys.userId }).from(apiKeys).where(eq(apiKeys.id, id)))[0]?.u
    ?? (await db.select({ u: deletedApiKeys.userId }).from(deletedApiKeys).where(eq(deletedApiKeys.id, id)))[0]?.u;
  return owner === undefined ? f : { ...f, userId: owner };
}

/** The WHERE terms of a log filter over the PostgreSQL table (empty = every row). */
export function pgLogConditions(f: UsageLogWhere): SQL[] {
  return logConditionsOf(usageLogs, f);
}

/**
 * PostgreSQL twin of ../repos/usage-logs.ts (same methods, async). The SQLite class prepares its
 * statements on the connection so they join the open transaction; here writes take the caller's
 * transaction explicitly (`insertOnce`), and the counters run on the pool.
 */
export class PgUsageLogsRepo {
  constructor(private readonly db: PgDb) {}

  async insertOnce(row: NewUsageLogRow, tx: PgWriter = this.db): Promise<boolean> {
    return (await tx.insert(usageLogs).values(row).onConflictDoNothing({ target: usageLogs.requestId }).returning({ id: usageLogs.id })).length > 0;
  }

  async addUserUsage(userId: number, cost: number, succeeded: boolean): Promise<void> {
    await this.db.update(users)
      .set({ usedQuota: sql`least(${users.usedQuota} + ${cost}, ${COUNTER_CAP})`, requestCount: sql`least(${users.requestCount} + ${succeeded ? 1 : 0}, ${COUNTER_CAP})` })
      .where(eq(users.id, userId));
  }

  async addKeyUsage(keyId: number, cost: number): Promise<void> {
    await this.db.update(apiKeys).set({
      usedQuota: sql`least(${apiKeys.usedQuota} + ${cost}, ${COUNTER_CAP})`,
      remainQuota: sql`case when ${apiKeys.unlimitedQuota} then ${apiKeys.remainQuota} else ${apiKeys.remainQuota} - ${cost} end`,
    }).where(eq(apiKeys.id, keyId));
  }

  async byRequestId(requestId: string): Promise<UsageLogRow | undefined> {
    return (await this.db.select().from(usageLogs).where(eq(usageLogs.requestId, requestId)))[0];
  }

  async deletedKeyOwners(keyIds: number[]): Promise<Map<number, number>> {
    const owners = new Map<number, number>();
    for (const ids of deletedKeyChunks(keyIds)) {
      const rows = await this.db.select({ id: deletedApiKeys.id, u: deletedApiKeys.userId }).from(deletedApiKeys).where(inArray(deletedApiKeys.id, ids));
      for (const r of rows) owners.set(r.id, r.u);
    }
    return owners;
  }

  async list(f: UsageLogFilter): Promise<{ items: UsageLogRow[]; total: number }> {
    const conds = pgLogConditions(f);
    const where = conds.length ? and(...conds) : undefined;
    // `total` counts every match; a cursor only moves the page.
    const paged = f.before ? and(...conds, ...beforeCondition(usageLogs, f.before)) : where;
    const page = () => this.db.select().from(usageLogs).where(paged).orderBy(desc(usageLogs.createdAt), desc(usageLogs.id)).limit(f.limit).offset(f.offset);
    const total = async () => (await this.db.select({ n: count() }).from(usageLogs).where(where))[0]!.n;
    if (f.offset === 0) {
      const [items, n] = await Promise.all([page(), total()]);
      return { items, total: n };
    }
    // Counted first: a page past the end (p up to 1,000,000) would walk every match (OFFSET reads each row) to find nothing.
    const n = await total();
    return { items: n > f.offset ? await page() : [], total: n };
  }
}
