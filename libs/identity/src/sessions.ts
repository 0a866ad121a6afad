import { GatewayError, nowSeconds, randomToken, sha256Hex } from '@gw/core';
import type { SessionsStore, UsersStore } from '@gw/db';
import { SESSION_ID_CHARS, USER_STATUS, isForeignKeyViolation } from '@gw/db';
import { wrongCurrentPassword } from './current-password';
import { ACCESS_TOKEN_PREFIX, type Principal } from './principal';
import type { AccessTokenView, LoginSessionView } from './views';

/**
 * Live management access tokens one user may hold. Each is a row and an entry in every listing of them, and
 * nothing else bounded them: a script could mint tokens for as long as it liked.
 */
export const MAX_ACCESS_TOKENS_PER_USER = 50;

/** Login sessions a listing shows (the newest), besides the caller's own. */
export const SESSIONS_LISTED = 100;

const tooManyTokens = () => new GatewayError(409, 'too_many_access_tokens',
  `A user may hold at most ${MAX_ACCESS_TOKENS_PER_USER} live access tokens; revoke unused ones first`);

/** Resolves management credentials (session cookie, access token) to a principal. */
export class ManagementAuth {
  constructor(
    private readonly users: UsersStore,
    private readonly sessions: SessionsStore,
  ) {}

  async fromSession(sessionId: string): Promise<Principal | null> {
    const hash = sha256Hex(sessionId);
    const s = await this.sessions.findSession(hash, nowSeconds());
    if (!s) return null;
    const user = await this.users.byId(s.userId);
    if (!user || user.status !== USER_STATUS.enabled) return null;
    return { user, via: 'session', sessionHash: hash };
  }

  async fromBearer(token: string): Promise<Principal | null> {
    if (!token.startsWith(ACCESS_TOKEN_PREFIX)) return null;
    const row = await this.sessions.findToken(sha256Hex(token));
    const now = nowSeconds();
    if (!row || row.revokedAt || (row.expiresAt && row.expiresAt <= now)) return null;
    const user = await this.users.byId(row.userId);
    if (!user || user.status !== USER_STATUS.enabled) return null;
    // Last-use time is advisory: only write it when it moved by a minute, not on every call.
    if (!row.lastUsedAt || now - row.lastUsedAt >= 60) await this.sessions.touchToken(row.id, now);
    return { user, via: 'token', tokenId: row.id };
  }

  /**
   * Ends the credential that made the call: the session, or the access token. A script that logs out with its
   * token believes it is logged out; answering 200 while the token kept working would be a lie.
   */
  async logout(p: Principal): Promise<void> {
    if (p.sessionHash) await this.sessions.deleteSession(p.sessionHash);
    if (p.via === 'token' && p.tokenId !== undefined) await this.sessions.revokeToken(p.user.id, p.tokenId, nowSeconds());
  }

  /**
   * The caller's live login sessions, so that one opened by someone else can be seen and ended: the
   * SESSIONS_LISTED newest, and the caller's own wherever it is. Logins are limited per address, not per user, so
   * a user can hold any number; the answer stays bounded (end_others still ends every one).
   */
  async listSessions(p: Principal): Promise<LoginSessionView[]> {
    const now = nowSeconds();
    const rows = await this.sessions.listSessions(p.user.id, now, SESSIONS_LISTED);
    if (p.sessionHash && !rows.some((r) => r.idHash === p.sessionHash)) {
      const own = await this.sessions.findSession(p.sessionHash, now);
      if (own) rows.push(own);
    }
    return rows.map((r) => ({
      id: r.idHash.slice(0, SESSION_ID_CHARS), created_at: r.createdAt, expires_at: r.expiresAt, ip: r.ip,
      user_agent: r.userAgent.slice(0, 512), current: r.idHash === p.sessionHash,
    }));
  }

  /** Ends one of the caller's sessions (the current one too: its next request is 401). */
  async endSession(p: Principal, id: string): Promise<void> {
    if (!(await this.sessions.deleteUserSession(p.user.id, id))) throw new GatewayError(404, 'session_not_found', `No session ${id} of yours`, { param: 'id' });
  }

  /** "Log out everywhere else": every other login session of the caller (all of them when the caller uses a token). */
  async endOtherSessions(p: Principal): Promise<number> {
    return this.sessions.endOtherSessions(p.user.id, p.sessionHash);
  }

  /**
   * `verifiedHash`: the password hash the caller's current password was checked against. The check is slow, and a
   * password change (or reset) that ended every token while it ran must not be outlived by this one: the account
   * is read again after the write, and the token withdrawn if the password or status changed meanwhile (a change
   * landing after that read still finds the token to revoke: it writes the account first, ends tokens after).
   */
  async createAccessToken(userId: number, name: string, expiresInDays?: number, verifiedHash?: string): Promise<{ token: string; view: AccessTokenView }> {
    const token = `${ACCESS_TOKEN_PREFIX}${randomToken(40)}`;
    const now = nowSeconds();
    const row = await this.sessions.createTokenBelow({
      userId, name, tokenHash: sha256Hex(token), prefix: token.slice(0, 10), createdAt: now,
      expiresAt: expiresInDays ? now + expiresInDays * 86400 : null,
    }, MAX_ACCESS_TOKENS_PER_USER, now).catch((err: unknown) => {
      // The account was deleted while the password was checked: as for one changed then (below), not a 500.
      throw verifiedHash !== undefined && isForeignKeyViolation(err, 'access_tokens_user_id_users_id_fk') ? wrongCurrentPassword() : err;
    });
    if (!row) throw tooManyTokens();
    if (verifiedHash !== undefined) {
      const after = await this.users.byId(userId);
      if (!after || after.passwordHash !== verifiedHash || after.status !== USER_STATUS.enabled) {
        await this.sessions.revokeToken(userId, row.id, now);
        throw wrongCurrentPassword();
      }
    }
    return { token, view: tokenView(row) };
  }

  /**
   * 409 `too_many_access_tokens` when the user already holds the most live tokens: asked before the slow password
   * check, so a refused mint costs none (the insert checks again, atomically).
   */
  async requireTokenRoom(userId: number): Promise<void> {
    if (await this.sessions.countLiveTokens(userId, nowSeconds()) >= MAX_ACCESS_TOKENS_PER_USER) throw tooManyTokens();
  }

  /** Every live token, and the most recently ended ones (revoked or expired) up to the same number. */
  async listAccessTokens(userId: number): Promise<AccessTokenView[]> {
    return (await this.sessions.listTokens(userId, { now: nowSeconds(), ended: MAX_ACCESS_TOKENS_PER_USER })).map(tokenView);
  }

  async revokeAccessToken(userId: number, id: number): Promise<void> {
    if (!(await this.sessions.revokeToken(userId, id, nowSeconds()))) throw new GatewayError(404, 'token_not_found', `No access token ${id}`, { param: 'id' });
  }

  /**
   * Revokes several of the user's tokens after one password check (`gw login --revoke-idle-days`: one check per
   * token would take dozens of slow checks, past the per-minute limit), and counts those this call revoked. The
   * user's tokens that already ended (revoked by a concurrent login listing the same idle ones, expired since they
   * were listed) are done, not an error. An id that was never a token of the user's is the single revoke's 404,
   * the same answer for another user's and an unknown id, and nothing is revoked.
   */
  async revokeAccessTokens(userId: number, ids: number[]): Promise<number> {
    const r = await this.sessions.revokeTokens(userId, [...new Set(ids)], nowSeconds());
    if ('notYours' in r) throw new GatewayError(404, 'token_not_found', `No access token ${r.notYours}`, { param: 'ids' });
    return r.revoked;
  }
}

function tokenView(r: { id: number; name: string; prefix: string; createdAt: number; expiresAt: number | null; lastUsedAt: number | null; revokedAt: number | null }): AccessTokenView {
  return { id: r.id, name: r.name, prefix: r.prefix, created_at: r.createdAt, expires_at: r.expiresAt, last_used_at: r.lastUsedAt, revoked: r.revokedAt !== null };
}
