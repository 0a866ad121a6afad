import { and, count, desc, eq, inArray, type SQL } from 'drizzle-orm';
import { inChunks } from '../repos/in-chunks';
import type { PgDb } from '../pg/client';
import { apiKeys, users } from '../schema-pg';
import type { ApiKeyRow, NewApiKeyRow } from '../repos/api-keys';
import { containsFolded } from './sql';

/** PostgreSQL twin of ../repos/api-keys.ts (same methods, async). */
export class PgApiKeysRepo {
  constructor(private readonly db: PgDb) {}

  async byId(id: number): Promise<ApiKeyRow | undefined> {
    return (await this.db.select().from(apiKeys).where(eq(apiKeys.id, id)))[0];
  }

  async byIds(ids: number[]): Promise<ApiKeyRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(apiKeys).where(inArray(apiKeys.id, chunk)));
  }

  async all(): Promise<ApiKeyRow[]> {
    return this.db.select().from(apiKeys);
  }

  async byUser(userId: number): Promise<ApiKeyRow[]> {
    return this.db.select().from(apiKeys).where(eq(apiKeys.userId, userId));
  }

  async byUsers(userIds: number[]): Promise<ApiKeyRow[]> {
    return inChunks(userIds, (chunk) => this.db.select().from(apiKeys).where(inArray(apiKeys.userId, chunk)));
  }

  async insert(row: NewApiKeyRow): Promise<ApiKeyRow> {
    return (await this.db.insert(apiKeys).values(row).returning())[0]!;
  }

  async insertBelow(row: NewApiKeyRow, max: number): Promise<ApiKeyRow | null> {
    if (max <= 0) return this.insert(row);
    return this.db.transaction(async (tx) => {
      // The owner's row lock serialises its key creations: a concurrent one counts after this commits.
      await tx.select({ id: users.id }).from(users).where(eq(users.id, row.userId)).for('update');
      const [t] = await tx.select({ n: count() }).from(apiKeys).where(eq(apiKeys.userId, row.userId));
      if (t!.n >= max) return null;
      return (await tx.insert(apiKeys).values(row).returning())[0]!;
    });
  }

  async update(id: number, patch: Partial<NewApiKeyRow>): Promise<ApiKeyRow | undefined> {
    return (await this.db.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning())[0];
  }

  async updateReplacing(id: number, patch: Partial<NewApiKeyRow>): Promise<{ before: ApiKeyRow; after: ApiKeyRow } | undefined> {
    return this.db.transaction(async (tx) => {
      // The row lock makes a concurrent write (any node) wait, or this one wait for it: `before` is what this write replaces.
      const [before] = await tx.select().from(apiKeys).where(eq(apiKeys.id, id)).for('update');
      if (!before) return undefined;
      const [after] = await tx.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning();
      return after ? { before, after } : undefined;
    });
  }

  async delete(id: number): Promise<boolean> {
    return (await this.db.delete(apiKeys).where(eq(apiKeys.id, id)).returning({ id: apiKeys.id })).length > 0;
  }

  async list(f: { userId: number; keyword?: string; status?: number; offset: number; limit: number }): Promise<{ items: ApiKeyRow[]; total: number }> {
    const conds: SQL[] = [eq(apiKeys.userId, f.userId)];
    if (f.status !== undefined) conds.push(eq(apiKeys.status, f.status));
    if (f.keyword) conds.push(containsFolded(apiKeys.name, f.keyword));
    const where = and(...conds);
    const [items, [t]] = await Promise.all([
      this.db.select().from(apiKeys).where(where).orderBy(desc(apiKeys.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(apiKeys).where(where),
    ]);
    return { items, total: t!.n };
  }
}
