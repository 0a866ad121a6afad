import { and, eq, gt, lt } from 'drizzle-orm';
import type { Db } from '../client';
import { sessions, accessTokens } from '../schema';

export type SessionRow = typeof sessions.$inferSelect;
export type AccessTokenRow = typeof accessTokens.$inferSelect;

/** Login sessions and management access tokens (both hashed bearer secrets of a user). */
export class SessionsRepo {
  constructor(private readonly db: Db) {}

  createSession(row: typeof sessions.$inferInsert): void {
    this.db.insert(sessions).values(row).run();
  }

  findSession(idHash: string, now: number): SessionRow | undefined {
    return this.db.select().from(sessions).where(and(eq(sessions.idHash, idHash), gt(sessions.expiresAt, now))).get();
  }

  deleteSession(idHash: string): void {
    this.db.delete(sessions).where(eq(sessions.idHash, idHash)).run();
  }

  /** Ends every session of a user (password change or reset). */
  deleteUserSessions(userId: number): number {
    return this.db.delete(sessions).where(eq(sessions.userId, userId)).returning({ h: sessions.idHash }).all().length;
  }

  purgeExpired(now: number): void {
    this.db.delete(sessions).where(lt(sessions.expiresAt, now)).run();
  }

  createToken(row: typeof accessTokens.$inferInsert): AccessTokenRow {
    return this.db.insert(accessTokens).values(row).returning().get();
  }

  findToken(tokenHash: string): AccessTokenRow | undefined {
    return this.db.select().from(accessTokens).where(eq(accessTokens.tokenHash, tokenHash)).get();
  }

  listTokens(userId: number): AccessTokenRow[] {
    return this.db.select().from(accessTokens).where(eq(accessTokens.userId, userId)).all();
  }

  touchToken(id: number, at: number): void {
    this.db.update(accessTokens).set({ lastUsedAt: at }).where(eq(accessTokens.id, id)).run();
  }

  revokeToken(userId: number, id: number, at: number): boolean {
    return this.db.update(accessTokens).set({ revokedAt: at })
      .where(and(eq(accessTokens.id, id), eq(accessTokens.userId, userId))).returning({ id: accessTokens.id }).all().length > 0;
  }
}
