import { and, eq, gt, lt } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { accessTokens, sessions } from '../schema-pg';
import type { AccessTokenRow, SessionRow } from '../repos/sessions';
import type { sessions as sqliteSessions, accessTokens as sqliteAccessTokens } from '../schema';

/** PostgreSQL twin of ../repos/sessions.ts (same methods, async). */
export class PgSessionsRepo {
  constructor(private readonly db: PgDb) {}

  async createSession(row: typeof sqliteSessions.$inferInsert): Promise<void> {
    await this.db.insert(sessions).values(row);
  }

  async findSession(idHash: string, now: number): Promise<SessionRow | undefined> {
    return (await this.db.select().from(sessions).where(and(eq(sessions.idHash, idHash), gt(sessions.expiresAt, now))))[0];
  }

  async deleteSession(idHash: string): Promise<void> {
    await this.db.delete(sessions).where(eq(sessions.idHash, idHash));
  }

  async deleteUserSessions(userId: number): Promise<number> {
    return (await this.db.delete(sessions).where(eq(sessions.userId, userId)).returning({ h: sessions.idHash })).length;
  }

  async purgeExpired(now: number): Promise<void> {
    await this.db.delete(sessions).where(lt(sessions.expiresAt, now));
  }

  async createToken(row: typeof sqliteAccessTokens.$inferInsert): Promise<AccessTokenRow> {
    return (await this.db.insert(accessTokens).values(row).returning())[0]!;
  }

  async findToken(tokenHash: string): Promise<AccessTokenRow | undefined> {
    return (await this.db.select().from(accessTokens).where(eq(accessTokens.tokenHash, tokenHash)))[0];
  }

  async listTokens(userId: number): Promise<AccessTokenRow[]> {
    return this.db.select().from(accessTokens).where(eq(accessTokens.userId, userId));
  }

  async touchToken(id: number, at: number): Promise<void> {
    await this.db.update(accessTokens).set({ lastUsedAt: at }).where(eq(accessTokens.id, id));
  }

  async revokeToken(userId: number, id: number, at: number): Promise<boolean> {
    return (await this.db.update(accessTokens).set({ revokedAt: at })
      .where(and(eq(accessTokens.id, id), eq(accessTokens.userId, userId))).returning({ id: accessTokens.id })).length > 0;
  }
}
