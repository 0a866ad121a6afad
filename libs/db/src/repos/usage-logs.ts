import { and, count, desc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { apiKeys, deletedApiKeys, usageLogs, users } from '../schema';
import { MAX_COUNTER } from '@gw/core';
import { beforeCondition, logConditionsOf } from './usage-stats-sql';

export type UsageLogRow = typeof usageLogs.$inferSelect;
export type NewUsageLogRow = typeof usageLogs.$inferInsert;

/** The filters of GET /api/log/ (and of the export, which pages the same rows by id). */
export interface UsageLogWhere {
  userId?: number;
  apiKeyId?: number;
  channelId?: number;
  model?: string;
  status?: number;
  /** Unix seconds, inclusive. */
  from?: number;
  to?: number;
}

export interface UsageLogFilter extends UsageLogWhere {
  offset: number;
  limit: number;
  /** Keyset paging: only rows older than this one in the listing's order (created_at, then id, newest first). */
  before?: { createdAt: number; id: number };
}

/**
 * The WHERE terms of a log filter (empty = every row). With both a user and a model, SQLite (which keeps no
 * statistics) may walk the (model, created_at) index: every user's rows of that model, so one user's listing
 * of a popular model would cost everyone's rows on the request thread. `+model` keeps the planner off that
 * index: a query that names a user costs at most that user's rows.
 */
export function logConditions(f: UsageLogWhere): SQL[] {
  if (f.userId === undefined || !f.model) return logConditionsOf(usageLogs, f);
  return [...logConditionsOf(usageLogs, { ...f, model: undefined }), sql`+${usageLogs.model} = ${f.model}`];
}

/**
 * `f` with the owner of its key as its user when it names a key and no user. A key's rows are all its owner's (a key
 * never changes hands; its id is never reused), so the query walks the owner's `(user_id, created_at)` rows where
 * `api_key_id = ?` alone has no index and scans every row. The route resolves live keys from memory; this also
 * finds deleted ones (deleted_api_keys, kept by a trigger). An id no key ever had is left as it is.
 */
export function withKeyOwner<T extends { userId?: number; apiKeyId?: number }>(db: Db, f: T): T {
  if (f.userId !== undefined || f.apiKeyId === undefined) return f;
  const id = f.apiKeyId;
  const owner = db.select({ u: apiKeys.userId }).from(apiKeys).where(eq(apiKeys.id, id)).get()?.u
    ?? db.select({ u: deletedApiKeys.userId }).from(deletedApiKeys).where(eq(deletedApiKeys.id, id)).get()?.u;
  return owner === undefined ? f : { ...f, userId: owner };
}

const p = (name: string) => sql.placeholder(name);

/** Usage log rows: storage interface. */
export interface UsageLogsStore {
  /** Inserts the row unless its request id exists; true when inserted (false = already settled). */
  insertOnce(row: NewUsageLogRow): Promise<boolean>;
  /** Adds a settled request to its user's used_quota (and request_count when it succeeded). */
  addUserUsage(userId: number, cost: number, succeeded: boolean): Promise<void>;
  /** Adds a settled request's cost to its key's used_quota, and takes it off remain_quota for limited keys. */
  addKeyUsage(keyId: number, cost: number): Promise<void>;
  byRequestId(requestId: string): Promise<UsageLogRow | undefined>;
  list(f: UsageLogFilter): Promise<{ items: UsageLogRow[]; total: number }>;
  /**
   * The users the deleted ones among `keyIds` belonged to (deleted_api_keys), by key id; a live key or an id no key
   * had is absent. One query per DELETED_KEYS_PER_QUERY ids, however many.
   */
  deletedKeyOwners(keyIds: number[]): Promise<Map<number, number>>;
}

/**
 * Ids bound in one `IN (…)` of deletedKeyOwners: under both backends' limits on bound parameters (SQLite 32766,
 * PostgreSQL 65535), and small enough that one read on SQLite's event loop stays short.
 */
export const DELETED_KEYS_PER_QUERY = 5_000;

/** `keyIds` in slices of DELETED_KEYS_PER_QUERY. */
export function* deletedKeyChunks(keyIds: number[]): Generator<number[]> {
  for (let i = 0; i < keyIds.length; i += DELETED_KEYS_PER_QUERY) yield keyIds.slice(i, i + DELETED_KEYS_PER_QUERY);
}

/**
 * Usage log rows (one per metered request, unique by request id) and the per-request counters written
 * with them at settle time. The settle statements are prepared once: they run for every request, and
 * building SQL each time would cost more than executing it. Prepared statements run on the connection,
 * so they take part in whatever transaction is open on it.
 */
export class UsageLogsRepo implements UsageLogsStore {
  private readonly insertStmt;
  private readonly userStmt;
  private readonly keyStmt;

  constructor(private readonly db: Db) {
    this.insertStmt = db.insert(usageLogs).values({
      requestId: p('requestId'), kind: p('kind'), userId: p('userId'), apiKeyId: p('apiKeyId'), channelId: p('channelId'),
      model: p('model'), upstreamModel: p('upstreamModel'), stream: p('stream'), inputTokens: p('inputTokens'),
      outputTokens: p('outputTokens'), cacheReadTokens: p('cacheReadTokens'), cacheWriteTokens: p('cacheWriteTokens'),
      audioInputTokens: p('audioInputTokens'), audioOutputTokens: p('audioOutputTokens'), cost: p('cost'), latencyMs: p('latencyMs'),
      ttftMs: p('ttftMs'), status: p('status'), errorCode: p('errorCode'), attempts: p('attempts'), ip: p('ip'), createdAt: p('createdAt'),
      webSearchRequests: p('webSearchRequests'), codeExecutionRequests: p('codeExecutionRequests'),
    } as any).onConflictDoNothing({ target: usageLogs.requestId }).returning({ id: usageLogs.id }).prepare();
    this.userStmt = db.update(users)
      .set({ usedQuota: sql`min(${users.usedQuota} + ${p('cost')}, ${sql.raw(String(MAX_COUNTER))})`, requestCount: sql`min(${users.requestCount} + ${p('ok')}, ${sql.raw(String(MAX_COUNTER))})` })
      .where(eq(users.id, p('userId'))).prepare();
    // remain_quota only means something for limited keys; the row itself says which it is.
    this.keyStmt = db.update(apiKeys).set({
      usedQuota: sql`min(${apiKeys.usedQuota} + ${p('cost')}, ${sql.raw(String(MAX_COUNTER))})`,
      remainQuota: sql`case when ${apiKeys.unlimitedQuota} then ${apiKeys.remainQuota} else ${apiKeys.remainQuota} - ${p('cost')} end`,
    }).where(eq(apiKeys.id, p('keyId'))).prepare();
  }

  /** Inserts the row unless its request id exists; true when inserted (false = already settled). */
  async insertOnce(row: NewUsageLogRow): Promise<boolean> {
    const v = {
      kind: 'messages', channelId: null, upstreamModel: '', stream: false, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0,
      cacheWriteTokens: 0, audioInputTokens: 0, audioOutputTokens: 0, webSearchRequests: 0, codeExecutionRequests: 0, cost: 0, latencyMs: 0, ttftMs: null, errorCode: '', attempts: 1, ip: '', ...row,
    };
    return this.insertStmt.all({ ...v, stream: v.stream ? 1 : 0 }).length > 0;
  }

  /** Adds a settled request to its user's used_quota (and request_count when it succeeded). */
  async addUserUsage(userId: number, cost: number, succeeded: boolean): Promise<void> {
    this.userStmt.run({ userId, cost, ok: succeeded ? 1 : 0 });
  }

  /** Adds a settled request's cost to its key's used_quota, and takes it off remain_quota for limited keys. */
  async addKeyUsage(keyId: number, cost: number): Promise<void> {
    this.keyStmt.run({ keyId, cost });
  }

  async byRequestId(requestId: string): Promise<UsageLogRow | undefined> {
    return this.db.select().from(usageLogs).where(eq(usageLogs.requestId, requestId)).get();
  }

  async deletedKeyOwners(keyIds: number[]): Promise<Map<number, number>> {
    const owners = new Map<number, number>();
    for (const ids of deletedKeyChunks(keyIds)) {
      const rows = this.db.select({ id: deletedApiKeys.id, u: deletedApiKeys.userId }).from(deletedApiKeys).where(inArray(deletedApiKeys.id, ids)).all();
      for (const r of rows) owners.set(r.id, r.u);
    }
    return owners;
  }

  async list(f: UsageLogFilter): Promise<{ items: UsageLogRow[]; total: number }> {
    return listUsageLogs(this.db, f);
  }
}

/**
 * One listing page and the count of every match, on the calling thread: the repository's `list`, and the
 * history worker's (history-worker.ts), which runs it in one read transaction.
 */
export function listUsageLogs(db: Db, f: UsageLogFilter): { items: UsageLogRow[]; total: number } {
  const conds = logConditions(f);
  const where = conds.length ? and(...conds) : undefined;
  // Newest first by (created_at, id): the (…, created_at) index the filter uses also yields this order (its
  // entries end with the rowid), so a page reads its own rows; by id alone it sorted every match first.
  // `total` counts every match; a cursor only moves the page.
  const total = db.select({ n: count() }).from(usageLogs).where(where).get()!.n;
  // A page past the end (p up to 1,000,000) would walk every match to find nothing.
  if (f.offset >= total) return { items: [], total };
  const paged = f.before ? and(...conds, ...beforeCondition(usageLogs, f.before)) : where;
  const items = db.select().from(usageLogs).where(paged).orderBy(desc(usageLogs.createdAt), desc(usageLogs.id)).limit(f.limit).offset(f.offset).all();
  return { items, total };
}
