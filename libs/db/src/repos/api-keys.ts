import { and, count, desc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import { inChunks } from './in-chunks';
import type { Db } from '../client';
import { apiKeys } from '../schema';

export type ApiKeyRow = typeof apiKeys.$inferSelect;
export type NewApiKeyRow = typeof apiKeys.$inferInsert;

/** Relay API keys: storage interface. */
export interface ApiKeysStore {
  byId(id: number): Promise<ApiKeyRow | undefined>;
  /** The rows of those ids that exist, in no particular order (the key index applying a burst of changes at once). */
  byIds(ids: number[]): Promise<ApiKeyRow[]>;
  all(): Promise<ApiKeyRow[]>;
  byUser(userId: number): Promise<ApiKeyRow[]>;
  /** Every key of those users (the key index re-indexing a burst of re-enabled users at once). */
  byUsers(userIds: number[]): Promise<ApiKeyRow[]>;
  insert(row: NewApiKeyRow): Promise<ApiKeyRow>;
  /**
   * insert(), unless the owner already holds `max` keys (0 = no cap): null then. Atomic, so concurrent
   * creates (on any node) cannot pass the cap together.
   */
  insertBelow(row: NewApiKeyRow, max: number): Promise<ApiKeyRow | null>;
  update(id: number, patch: Partial<NewApiKeyRow>): Promise<ApiKeyRow | undefined>;
  /**
   * update(), also returning the row exactly as the write found it (`before`), read in the write's transaction
   * with the row locked: what a change replaced, not what a caller read earlier (a concurrent write in between
   * would otherwise be overwritten unseen). undefined when there is no such key.
   */
  updateReplacing(id: number, patch: Partial<NewApiKeyRow>): Promise<{ before: ApiKeyRow; after: ApiKeyRow } | undefined>;
  delete(id: number): Promise<boolean>;
  list(f: { userId: number; keyword?: string; status?: number; offset: number; limit: number }): Promise<{ items: ApiKeyRow[]; total: number }>;
}

/** Storage of relay API keys (hashed); knows SQL, no rules. */
export class ApiKeysRepo implements ApiKeysStore {
  constructor(private readonly db: Db) {}

  async byId(id: number): Promise<ApiKeyRow | undefined> {
    return this.db.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
  }

  async byIds(ids: number[]): Promise<ApiKeyRow[]> {
    return inChunks(ids, (chunk) => this.db.select().from(apiKeys).where(inArray(apiKeys.id, chunk)).all());
  }

  async all(): Promise<ApiKeyRow[]> {
    return this.db.select().from(apiKeys).all();
  }

  async byUser(userId: number): Promise<ApiKeyRow[]> {
    return this.db.select().from(apiKeys).where(eq(apiKeys.userId, userId)).all();
  }

  async byUsers(userIds: number[]): Promise<ApiKeyRow[]> {
    return inChunks(userIds, (chunk) => this.db.select().from(apiKeys).where(inArray(apiKeys.userId, chunk)).all());
  }

  async insert(row: NewApiKeyRow): Promise<ApiKeyRow> {
    return this.db.insert(apiKeys).values(row).returning().get();
  }

  async insertBelow(row: NewApiKeyRow, max: number): Promise<ApiKeyRow | null> {
    return this.db.transaction((tx) => {
      if (max > 0 && tx.select({ n: count() }).from(apiKeys).where(eq(apiKeys.userId, row.userId)).get()!.n >= max) return null;
      return tx.insert(apiKeys).values(row).returning().get();
    });
  }

  async update(id: number, patch: Partial<NewApiKeyRow>): Promise<ApiKeyRow | undefined> {
    return this.db.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning().get();
  }

  async updateReplacing(id: number, patch: Partial<NewApiKeyRow>): Promise<{ before: ApiKeyRow; after: ApiKeyRow } | undefined> {
    // One synchronous transaction on the process's only connection: no other write can come between the read and the write.
    return this.db.transaction((tx) => {
      const before = tx.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
      if (!before) return undefined;
      const after = tx.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning().get();
      return after ? { before, after } : undefined;
    }, { behavior: 'immediate' });
  }

  async delete(id: number): Promise<boolean> {
    return this.db.delete(apiKeys).where(eq(apiKeys.id, id)).returning({ id: apiKeys.id }).all().length > 0;
  }

  async list(f: { userId: number; keyword?: string; status?: number; offset: number; limit: number }): Promise<{ items: ApiKeyRow[]; total: number }> {
    const conds: SQL[] = [eq(apiKeys.userId, f.userId)];
    if (f.status !== undefined) conds.push(eq(apiKeys.status, f.status));
    if (f.keyword) conds.push(sql`instr(lower(${apiKeys.name}), lower(${f.keyword})) > 0`);
    const where = and(...conds);
    const items = this.db.select().from(apiKeys).where(where).orderBy(desc(apiKeys.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(apiKeys).where(where).get()!.n;
    return { items, total };
  }
}
