import { and, count, desc, eq, type SQL } from 'drizzle-orm';
import type { Db } from '../client';
import { realtimeSessions } from '../schema';

export type RealtimeSessionRow = typeof realtimeSessions.$inferSelect;
export type RealtimeSessionInsert = Omit<typeof realtimeSessions.$inferInsert, 'id'>;

/** Realtime session records: storage interface. */
export interface RealtimeSessionsStore {
  /** Writes a session record; a second write of the same session id is ignored. */
  insert(row: RealtimeSessionInsert): Promise<void>;
  bySessionId(sessionId: string): Promise<RealtimeSessionRow | undefined>;
  list(f: { userId?: number; offset: number; limit: number }): Promise<{ items: RealtimeSessionRow[]; total: number }>;
}

/** Realtime session records: one row per WebSocket session, written once when it ends. */
export class RealtimeSessionsRepo implements RealtimeSessionsStore {
  constructor(private readonly db: Db) {}

  /** Writes a session record; a second write of the same session id is ignored. */
  async insert(row: RealtimeSessionInsert): Promise<void> {
    this.db.insert(realtimeSessions).values(row).onConflictDoNothing({ target: realtimeSessions.sessionId }).run();
  }

  async bySessionId(sessionId: string): Promise<RealtimeSessionRow | undefined> {
    return this.db.select().from(realtimeSessions).where(eq(realtimeSessions.sessionId, sessionId)).get();
  }

  async list(f: { userId?: number; offset: number; limit: number }): Promise<{ items: RealtimeSessionRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(realtimeSessions.userId, f.userId));
    const where = conds.length ? and(...conds) : undefined;
    const items = this.db.select().from(realtimeSessions).where(where).orderBy(desc(realtimeSessions.id)).limit(f.limit).offset(f.offset).all();
    const total = this.db.select({ n: count() }).from(realtimeSessions).where(where).get()!.n;
    return { items, total };
  }
}
