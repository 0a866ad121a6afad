import { and, count, desc, eq, gte, lte, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { usageLogs } from '../schema';

export type UsageLogRow = typeof usageLogs.$inferSelect;
export type NewUsageLogRow = typeof usageLogs.$inferInsert;

export interface UsageLogFilter {
  userId?: number;
  apiKeyId?: number;
  channelId?: number;
  model?: string;
  status?: number;
  /** Unix seconds, inclusive. */
  from?: number;
  to?: number;
  offset: number;
  limit: number;
}

type Tx = Pick<Db, 'select' | 'insert' | 'update'>;

/** Usage log rows: one per metered request, unique by request id. */
export class UsageLogsRepo {
  constructor(private readonly db: Db) {}

  /** Inserts the row unless its request id exists; true when inserted (false = already settled). */
  insertOnce(row: NewUsageLogRow, tx: Tx = this.db): boolean {
    return tx.insert(usageLogs).values(row).onConflictDoNothing({ target: usageLogs.requestId })
      .returning({ id: usageLogs.id }).all().length > 0;
  }

  byRequestId(requestId: string): UsageLogRow | undefined {
    return this.db.select().from(usageLogs).where(eq(usageLogs.requestId, requestId)).get();
  }

  list(f: UsageLogFilter): { items: UsageLogRow[]; total: number } {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(usageLogs.userId, f.userId));
    if (f.apiKeyId !== undefined) conds.push(eq(usageLogs.apiKeyId, f.apiKeyId));
    if (f.channelId !== undefined) conds.push(eq(usageLogs.channelId, f.channelId));
    if (f.model) conds.push(eq(usageLogs.model, f.model));
    if (f.status !== undefined) conds.push(eq(usageLogs.status, f.status));
    if (f.from !== undefined) conds.push(gte(usageLogs.createdAt, f.from));
    if (f.to !== undefined) conds.push(lte(usageLogs.createdAt, f.to));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(usageLogs).where(where).orderBy(desc(usageLogs.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(usageLogs).where(where).get()!.n;
    return { items, total };
  }
}
