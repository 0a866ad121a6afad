import { and, asc, count, desc, eq, gt, inArray, lt, ne, sql } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { accessTokens, sessions, users } from '../schema-pg';
import { SESSION_ID_CHARS, endedTokenOf, firstNotOwned, liveTokenOf, type AccessTokenRow, type SessionRow, type TokensRevoked } from '../repos/sessions';
import type { sessions as sqliteSessions, accessTokens as sqliteAccessTokens } from '../schema';

/** The login sessions of `userId` other than `keep` (every one when it is undefined). */
export const otherSessions = (userId: number, keep: string | undefined) =>
  keep ? and(eq(sessions.userId, userId), ne(sessions.idHash, keep)) : eq(sessions.userId, userId);

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

  async listSessions(userId: number, now: number, limit?: number): Promise<SessionRow[]> {
    const q = this.db.select().from(sessions).where(and(eq(sessions.userId, userId), gt(sessions.expiresAt, now)))
      .orderBy(desc(sessions.createdAt), sessions.idHash);
    return limit === undefined ? q : q.limit(limit);
  }

  async deleteUserSession(userId: number, idPrefix: string): Promise<boolean> {
    return (await this.db.delete(sessions)
      .where(and(eq(sessions.userId, userId), sql`substr(${sessions.idHash}, 1, ${SESSION_ID_CHARS}) = ${idPrefix}`))
      .returning({ h: sessions.idHash })).length > 0;
  }

  async deleteUserSessions(userId: number): Promise<number> {
    return (await this.db.delete(sessions).where(eq(sessions.userId, userId)).returning({ h: sessions.idHash })).length;
  }

  async endOtherSessions(userId: number, keepSessionHash: string | undefined): Promise<number> {
    return (await this.db.delete(sessions).where(otherSessions(userId, keepSessionHash)).returning({ h: sessions.idHash })).length;
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

  async createTokenBelow(row: typeof sqliteAccessTokens.$inferInsert, max: number, now: number): Promise<AccessTokenRow | null> {
    return this.db.transaction(async (tx) => {
      // The owner's row lock serialises its token creations: a concurrent one counts after this commits.
      await tx.select({ id: users.id }).from(users).where(eq(users.id, row.userId)).for('update');
      const [t] = await tx.select({ n: count() }).from(accessTokens).where(and(eq(accessTokens.userId, row.userId), liveTokenOf(accessTokens, now)));
      if (t!.n >= max) return null;
      return (await tx.insert(accessTokens).values(row).returning())[0]!;
    });
  }

  async countLiveTokens(userId: number, now: number): Promise<number> {
    const [t] = await this.db.select({ n: count() }).from(accessTokens).where(and(eq(accessTokens.userId, userId), liveTokenOf(accessTokens, now)));
    return t!.n;
  }

  async listTokens(userId: number, shown?: { now: number; ended: number }): Promise<AccessTokenRow[]> {
    const mine = eq(accessTokens.userId, userId);
    if (!shown) return this.db.select().from(accessTokens).where(mine).orderBy(asc(accessTokens.id));
    const [live, ended] = await Promise.all([
      this.db.select().from(accessTokens).where(and(mine, liveTokenOf(accessTokens, shown.now))),
      this.db.select().from(accessTokens).where(and(mine, endedTokenOf(accessTokens, shown.now))).orderBy(desc(accessTokens.id)).limit(shown.ended),
    ]);
    return [...live, ...ended].sort((a, b) => a.id - b.id);
  }

  async touchToken(id: number, at: number): Promise<void> {
    await this.db.update(accessTokens).set({ lastUsedAt: at }).where(eq(accessTokens.id, id));
  }

  async revokeToken(userId: number, id: number, at: number): Promise<boolean> {
    return (await this.db.update(accessTokens).set({ revokedAt: sql`coalesce(${accessTokens.revokedAt}, ${at})` })
      .where(and(eq(accessTokens.id, id), eq(accessTokens.userId, userId))).returning({ id: accessTokens.id })).length > 0;
  }

  async revokeTokens(userId: number, ids: number[], at: number): Promise<TokensRevoked> {
    const mine = and(eq(accessTokens.userId, userId), inArray(accessTokens.id, ids));
    return this.db.transaction(async (tx) => {
      const notYours = firstNotOwned(ids, await tx.select({ id: accessTokens.id }).from(accessTokens).where(mine));
      if (notYours !== undefined) return { notYours };
      // A concurrent batch holding the same rows commits first; this UPDATE then re-reads them and skips the
      // revoked ones, so each token is counted by one batch.
      return { revoked: (await tx.update(accessTokens).set({ revokedAt: at }).where(and(mine, liveTokenOf(accessTokens, at))).returning({ id: accessTokens.id })).length };
    });
  }
}
