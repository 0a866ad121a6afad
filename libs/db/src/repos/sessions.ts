import { and, asc, count, desc, eq, gt, inArray, isNotNull, isNull, lt, lte, ne, or, sql } from 'drizzle-orm';
import type { Db } from '../client';
import { sessions, accessTokens } from '../schema';

export type SessionRow = typeof sessions.$inferSelect;
export type AccessTokenRow = typeof accessTokens.$inferSelect;

/**
 * How many hex characters of a session's id hash name it in the API (64 bits): the hash of a secret is not
 * the secret, and a prefix of it cannot be turned back into a cookie.
 */
export const SESSION_ID_CHARS = 16;

/** The login sessions of `userId` other than `keep` (every one when it is undefined). */
export const otherSessions = (userId: number, keep: string | undefined) =>
  keep ? and(eq(sessions.userId, userId), ne(sessions.idHash, keep)) : eq(sessions.userId, userId);

/** Login sessions and management access tokens: storage interface. */
export interface SessionsStore {
  createSession(row: typeof sessions.$inferInsert): Promise<void>;
  findSession(idHash: string, now: number): Promise<SessionRow | undefined>;
  deleteSession(idHash: string): Promise<void>;
  /** The user's live sessions (not expired at `now`), newest first; at most `limit` of them when given. */
  listSessions(userId: number, now: number, limit?: number): Promise<SessionRow[]>;
  /** Ends the user's session whose id hash starts with `idPrefix` (SESSION_ID_CHARS hex); false when none. */
  deleteUserSession(userId: number, idPrefix: string): Promise<boolean>;
  /** Ends every session of a user (password change or reset). */
  deleteUserSessions(userId: number): Promise<number>;
  /** Ends every login session of the user but `keepSessionHash` (2FA turned on, new backup codes, "log out elsewhere"); access tokens stay. Returns the count. */
  endOtherSessions(userId: number, keepSessionHash: string | undefined): Promise<number>;
  purgeExpired(now: number): Promise<void>;
  createToken(row: typeof accessTokens.$inferInsert): Promise<AccessTokenRow>;
  findToken(tokenHash: string): Promise<AccessTokenRow | undefined>;
  /**
   * Inserts the token unless the user already holds `max` live ones (not revoked, not expired at `now`); null
   * then. Atomic: concurrent inserts for one user never exceed `max`.
   */
  createTokenBelow(row: typeof accessTokens.$inferInsert, max: number, now: number): Promise<AccessTokenRow | null>;
  /** The user's live tokens (not revoked, not expired at `now`). */
  countLiveTokens(userId: number, now: number): Promise<number>;
  /**
   * The user's tokens, oldest first. With `shown`: every live one at `shown.now`, and of the ended ones (revoked or
   * expired) only the `shown.ended` newest, so the answer stays bounded however many have ended.
   */
  listTokens(userId: number, shown?: { now: number; ended: number }): Promise<AccessTokenRow[]>;
  touchToken(id: number, at: number): Promise<void>;
  revokeToken(userId: number, id: number, at: number): Promise<boolean>;
  /**
   * Revokes those of `ids` (distinct, at most a few hundred: one statement) that are the user's live tokens at `at`,
   * in one transaction, and counts them; the user's ended ones are left as they ended. When one of `ids` was never a
   * token of the user's, nothing is written and that id is returned instead.
   */
  revokeTokens(userId: number, ids: number[], at: number): Promise<TokensRevoked>;
}

export type TokensRevoked = { revoked: number } | { notYours: number };

/** The first of `ids` not among `owned` (the ids of the user's tokens among them). */
export const firstNotOwned = (ids: number[], owned: { id: number }[]): number | undefined => {
  const have = new Set(owned.map((r) => r.id));
  return ids.find((id) => !have.has(id));
};

/** Login sessions and management access tokens (both hashed bearer secrets of a user). */
export class SessionsRepo implements SessionsStore {
  constructor(private readonly db: Db) {}

  async createSession(row: typeof sessions.$inferInsert): Promise<void> {
    this.db.insert(sessions).values(row).run();
  }

  async findSession(idHash: string, now: number): Promise<SessionRow | undefined> {
    return this.db.select().from(sessions).where(and(eq(sessions.idHash, idHash), gt(sessions.expiresAt, now))).get();
  }

  async deleteSession(idHash: string): Promise<void> {
    this.db.delete(sessions).where(eq(sessions.idHash, idHash)).run();
  }

  async listSessions(userId: number, now: number, limit?: number): Promise<SessionRow[]> {
    const q = this.db.select().from(sessions).where(and(eq(sessions.userId, userId), gt(sessions.expiresAt, now)))
      .orderBy(desc(sessions.createdAt), sessions.idHash);
    return (limit === undefined ? q : q.limit(limit)).all();
  }

  async deleteUserSession(userId: number, idPrefix: string): Promise<boolean> {
    return this.db.delete(sessions)
      .where(and(eq(sessions.userId, userId), sql`substr(${sessions.idHash}, 1, ${SESSION_ID_CHARS}) = ${idPrefix}`))
      .returning({ h: sessions.idHash }).all().length > 0;
  }

  /** Ends every session of a user (password change or reset). */
  async deleteUserSessions(userId: number): Promise<number> {
    return this.db.delete(sessions).where(eq(sessions.userId, userId)).returning({ h: sessions.idHash }).all().length;
  }

  async endOtherSessions(userId: number, keepSessionHash: string | undefined): Promise<number> {
    return this.db.delete(sessions).where(otherSessions(userId, keepSessionHash)).returning({ h: sessions.idHash }).all().length;
  }

  async purgeExpired(now: number): Promise<void> {
    this.db.delete(sessions).where(lt(sessions.expiresAt, now)).run();
  }

  async createToken(row: typeof accessTokens.$inferInsert): Promise<AccessTokenRow> {
    return this.db.insert(accessTokens).values(row).returning().get();
  }

  async findToken(tokenHash: string): Promise<AccessTokenRow | undefined> {
    return this.db.select().from(accessTokens).where(eq(accessTokens.tokenHash, tokenHash)).get();
  }

  async createTokenBelow(row: typeof accessTokens.$inferInsert, max: number, now: number): Promise<AccessTokenRow | null> {
    return this.db.transaction((tx) => {
      if (tx.select({ n: count() }).from(accessTokens).where(and(eq(accessTokens.userId, row.userId), liveToken(now))).get()!.n >= max) return null;
      return tx.insert(accessTokens).values(row).returning().get();
    });
  }

  async countLiveTokens(userId: number, now: number): Promise<number> {
    return this.db.select({ n: count() }).from(accessTokens).where(and(eq(accessTokens.userId, userId), liveToken(now))).get()!.n;
  }

  async listTokens(userId: number, shown?: { now: number; ended: number }): Promise<AccessTokenRow[]> {
    const mine = eq(accessTokens.userId, userId);
    if (!shown) return this.db.select().from(accessTokens).where(mine).orderBy(asc(accessTokens.id)).all();
    const live = this.db.select().from(accessTokens).where(and(mine, liveToken(shown.now))).all();
    const ended = this.db.select().from(accessTokens).where(and(mine, endedToken(shown.now))).orderBy(desc(accessTokens.id)).limit(shown.ended).all();
    return [...live, ...ended].sort((a, b) => a.id - b.id);
  }

  async touchToken(id: number, at: number): Promise<void> {
    this.db.update(accessTokens).set({ lastUsedAt: at }).where(eq(accessTokens.id, id)).run();
  }

  async revokeToken(userId: number, id: number, at: number): Promise<boolean> {
    return this.db.update(accessTokens).set({ revokedAt: sql`coalesce(${accessTokens.revokedAt}, ${at})` })
      .where(and(eq(accessTokens.id, id), eq(accessTokens.userId, userId))).returning({ id: accessTokens.id }).all().length > 0;
  }

  async revokeTokens(userId: number, ids: number[], at: number): Promise<TokensRevoked> {
    const mine = and(eq(accessTokens.userId, userId), inArray(accessTokens.id, ids));
    return this.db.transaction((tx) => {
      const notYours = firstNotOwned(ids, tx.select({ id: accessTokens.id }).from(accessTokens).where(mine).all());
      if (notYours !== undefined) return { notYours };
      return { revoked: tx.update(accessTokens).set({ revokedAt: at }).where(and(mine, liveToken(at))).returning({ id: accessTokens.id }).all().length };
    });
  }
}

/** Not revoked and not expired at `now` (expires_at null = never). */
export const liveTokenOf = (t: { revokedAt: any; expiresAt: any }, now: number) => and(isNull(t.revokedAt), or(isNull(t.expiresAt), gt(t.expiresAt, now)))!;
/** Revoked, or expired at `now`. */
export const endedTokenOf = (t: { revokedAt: any; expiresAt: any }, now: number) => or(isNotNull(t.revokedAt), lte(t.expiresAt, now))!;
const liveToken = (now: number) => liveTokenOf(accessTokens, now);
const endedToken = (now: number) => endedTokenOf(accessTokens, now);
