import { and, count, desc, eq, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { apiKeys } from '../schema';

export type ApiKeyRow = typeof apiKeys.$inferSelect;
export type NewApiKeyRow = typeof apiKeys.$inferInsert;

/** Storage of relay API keys (hashed); knows SQL, no rules. */
export class ApiKeysRepo {
  constructor(private readonly db: Db) {}

  byId(id: number): ApiKeyRow | undefined {
    return this.db.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
  }

  all(): ApiKeyRow[] {
    return this.db.select().from(apiKeys).all();
  }

  byUser(userId: number): ApiKeyRow[] {
    return this.db.select().from(apiKeys).where(eq(apiKeys.userId, userId)).all();
  }

  insert(row: NewApiKeyRow): ApiKeyRow {
    return this.db.insert(apiKeys).values(row).returning().get();
  }

  update(id: number, patch: Partial<NewApiKeyRow>): ApiKeyRow | undefined {
    return this.db.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning().get();
  }

  delete(id: number): boolean {
    return this.db.delete(apiKeys).where(eq(apiKeys.id, id)).returning({ id: apiKeys.id }).all().length > 0;
  }

  list(f: { userId: number; keyword?: string; status?: number; offset: number; limit: number }): { items: ApiKeyRow[]; total: number } {
    const conds: SQL[] = [eq(apiKeys.userId, f.userId)];
    if (f.status !== undefined) conds.push(eq(apiKeys.status, f.status));
    if (f.keyword) conds.push(sql`instr(lower(${apiKeys.name}), lower(${f.keyword})) > 0`);
    const where = and(...conds);
    const items = this.db.select().from(apiKeys).where(where).orderBy(desc(apiKeys.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(apiKeys).where(where).get()!.n;
    return { items, total };
  }
}
