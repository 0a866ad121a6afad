import { and, count, desc, eq, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { realtimeSessions } from '../schema-pg';
import type { RealtimeSessionInsert, RealtimeSessionRow } from '../repos/realtime-sessions';

/** PostgreSQL twin of ../repos/realtime-sessions.ts (same methods, async). */
export class PgRealtimeSessionsRepo {
  constructor(private readonly db: PgDb) {}

  async insert(row: RealtimeSessionInsert): Promise<void> {
    await this.db.insert(realtimeSessions).values(row).onConflictDoNothing({ target: realtimeSessions.sessionId });
  }

  async bySessionId(sessionId: string): Promise<RealtimeSessionRow | undefined> {
    return (await this.db.select().from(realtimeSessions).where(eq(realtimeSessions.sessionId, sessionId)))[0];
  }

  async list(f: { userId?: number; offset: number; limit: number }): Promise<{ items: RealtimeSessionRow[]; total: number }> {
    const conds: SQL[] = [];
    if (f.userId !== undefined) conds.push(eq(realtimeSessions.userId, f.userId));
    const where = conds.length ? and(...conds) : undefined;
    const [items, [t]] = await Promise.all([
      this.db.select().from(realtimeSessions).where(where).orderBy(desc(realtimeSessions.id)).limit(f.limit).offset(f.offset),
      this.db.select({ n: count() }).from(realtimeSessions).where(where),
    ]);
    return { items, total: t!.n };
  }
}
