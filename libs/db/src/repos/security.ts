import { and, count, eq, gt, isNull, lt, ne, sql } from 'drizzle-orm';
import type { Db } from '../client';
import { USER_STATUS, accessTokens, backupCodes, passwordResets, sessions, users } from '../schema';
import { otherSessions } from './sessions';
import { belowActor } from './actor-guard';

/** A 2FA write that landed, and the other login sessions it ended with it. */
export interface TwoFactorWritten { sessionsEnded: number }

/** What a password reset or change ended. */
export interface CredentialsEnded { sessions_ended: number; tokens_revoked: number }

/** The account a reset token is written for, as the writer read it: the write happens only while it is still so. */
export interface ResetBasis { passwordHash: string; email: string }

/** The user is enabled and still has the password hash and e-mail the reset request was decided on. */
const resetBasisHolds = (userId: number, basis: ResetBasis) =>
  and(eq(users.id, userId), eq(users.status, USER_STATUS.enabled), eq(users.passwordHash, basis.passwordHash), eq(users.email, basis.email));

/** Account security (TOTP, backup codes, reset tokens, lockout): storage interface; every use-once step is one conditional write. */
export interface SecurityStore {
  /** Stores a new (pending) sealed TOTP secret; 2FA stays off until `enableTotp`. */
  setPendingTotp(userId: number, sealed: string, now: number): Promise<boolean>;
  /** Accepts TOTP time step `step` for the user once: false when it (or a later step) was already used. */
  claimTotpStep(userId: number, step: number): Promise<boolean>;
  /**
   * Turns 2FA on (claiming `step`) and installs a fresh set of backup codes, in one transaction, only while the
   * pending secret is still `sealed` (the one the code was checked against) and the password hash still
   * `passwordHash` (the one the current password was checked against): false when either was replaced. Every login
   * session of the user but `keepSessionHash` ends in the same transaction (their count returned): ended after it, a
   * password change committed in between would have its own kept session ended by this earlier write.
   */
  enableTotp(userId: number, step: number, codeHashes: string[], now: number, sealed: string, passwordHash: string, keepSessionHash?: string): Promise<TwoFactorWritten | false>;
  /**
   * Turns 2FA off: forgets the secret and every backup code. With `actorId` (an admin's reset) only while the user's
   * role is below that user's, both as the write reads them: false, nothing changed, when it is not (the target
   * promoted, or the actor demoted or deleted, since the caller's check), or the user is gone.
   */
  disableTotp(userId: number, now: number, actorId?: number): Promise<boolean>;
  /**
   * Replaces the user's backup codes (the old ones stop working). With `ifPasswordHash`, only while the user's
   * password hash is still that one (the one the current password was checked against): false, nothing written.
   * With `endOthers`, every login session of the user but `endOthers.keep` ends in the same transaction (see enableTotp).
   */
  replaceBackupCodes(userId: number, codeHashes: string[], now: number, ifPasswordHash?: string, endOthers?: { keep: string | undefined }): Promise<TwoFactorWritten | false>;
  /** Marks an unused backup code used; false when no such unused code exists. */
  consumeBackupCode(userId: number, codeHash: string, now: number): Promise<boolean>;
  unusedBackupCodes(userId: number): Promise<number>;
  /**
   * Stores a reset token hash and voids every earlier token of the user; false, nothing written, when the user is not
   * (or no longer) enabled, or its password hash or e-mail is no longer `basis`'s (the row the caller decided on):
   * read in the write's transaction, so a disable, password change or new address landing after the caller's own
   * check, which voided the links pending then, leaves no fresh link behind it.
   */
  createResetToken(userId: number, tokenHash: string, expiresAt: number, now: number, basis: ResetBasis): Promise<boolean>;
  /** Voids every unused reset token of the user (its e-mail address changed: a link sent to the old one must not work). */
  voidResetTokens(userId: number): Promise<void>;
  /** True when `tokenHash` is an unused, unexpired token of `userId` (does not consume it). */
  resetTokenValid(userId: number, tokenHash: string, now: number): Promise<boolean>;
  /**
   * Consumes the token and sets the new password hash in one transaction (clearing the lockout);
   * false, nothing written, when the token is unknown, used, expired or of another user, or the user is not enabled.
   */
  resetPassword(userId: number, tokenHash: string, passwordHash: string, now: number): Promise<boolean>;
  /**
   * Account recovery: ends every login session and revokes every management access token of the
   * user, except the one credential in `keep` (the session or token making a password change), in
   * one transaction. Returns what was ended. Pending password-reset links of the user are voided with them: the
   * password they would replace is gone, and whoever holds one (a mailbox read by someone else) must not undo it.
   */
  endCredentials(userId: number, keep: { sessionHash?: string; tokenId?: number }, now: number): Promise<CredentialsEnded>;
  /**
   * Counts one failed login atomically (concurrent wrong attempts cannot overwrite each other's
   * count). At `maxFailures` the account locks for lockSeconds * 2^(locks so far), rounded up to a
   * whole second so a lock never lasts less than configured. Returns the new lock end (0 = none).
   */
  recordLoginFailure(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<number>;
  /**
   * Claims one password check before it runs: refused (the lock's end returned, nothing counted) while the
   * account is locked; else counted as a failure now (as recordLoginFailure counts, which may lock the account
   * for the checks after it). A burst of parallel logins thus gets at most `maxFailures` checks evaluated; a
   * check that then succeeds clears the counters.
   */
  claimLoginAttempt(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<LoginClaim>;
  /**
   * Gives back a claimed check that was not a failure (a right password still waiting for its second factor):
   * one failure less, and the lock undone if this claim set it.
   */
  releaseLoginAttempt(userId: number, claim: LoginClaim, policy: { maxFailures: number }): Promise<void>;
}

/** A claimed login check: `lockedUntil` > 0 = refused (the account is locked); `locked` = this claim set the lock. */
export interface LoginClaim { lockedUntil: number; locked: boolean }

/**
 * Storage for account security: TOTP state, backup codes, reset tokens and the lockout counters.
 * Every "use once" operation is a single conditional UPDATE, so two concurrent requests with the
 * same code or token cannot both succeed (also across processes sharing the database).
 */
export class SecurityRepo implements SecurityStore {
  constructor(private readonly db: Db) {}

  /** Stores a new (pending) sealed TOTP secret; 2FA stays off until `enableTotp`. */
  async setPendingTotp(userId: number, sealed: string, now: number): Promise<boolean> {
    return this.db.update(users).set({ totpSecret: sealed, updatedAt: now })
      .where(and(eq(users.id, userId), eq(users.totpEnabled, false))).returning({ id: users.id }).all().length > 0;
  }

  /** Accepts TOTP time step `step` for the user once: false when it (or a later step) was already used. */
  async claimTotpStep(userId: number, step: number): Promise<boolean> {
    return this.db.update(users).set({ totpLastStep: step })
      .where(and(eq(users.id, userId), lt(users.totpLastStep, step))).returning({ id: users.id }).all().length > 0;
  }

  /** Turns 2FA on (claiming `step`) and installs a fresh set of backup codes, in one transaction. */
  async enableTotp(userId: number, step: number, codeHashes: string[], now: number, sealed: string, passwordHash: string, keepSessionHash?: string): Promise<TwoFactorWritten | false> {
    return this.db.transaction((tx) => {
      const done = tx.update(users).set({ totpEnabled: true, totpLastStep: step, updatedAt: now })
        .where(and(eq(users.id, userId), eq(users.totpEnabled, false), lt(users.totpLastStep, step), eq(users.totpSecret, sealed), eq(users.passwordHash, passwordHash)))
        .returning({ id: users.id }).all().length > 0;
      if (!done) return false;
      tx.delete(backupCodes).where(eq(backupCodes.userId, userId)).run();
      if (codeHashes.length) tx.insert(backupCodes).values(codeHashes.map((codeHash) => ({ userId, codeHash, createdAt: now }))).run();
      return { sessionsEnded: tx.delete(sessions).where(otherSessions(userId, keepSessionHash)).returning({ h: sessions.idHash }).all().length };
    });
  }

  /** Turns 2FA off: forgets the secret and every backup code (with `actorId`, only while the role is below the actor's). */
  async disableTotp(userId: number, now: number, actorId?: number): Promise<boolean> {
    return this.db.transaction((tx) => {
      const below = actorId === undefined ? undefined : belowActor(users.role, actorId);
      const hit = tx.update(users).set({ totpEnabled: false, totpSecret: null, updatedAt: now }).where(and(eq(users.id, userId), below)).returning({ id: users.id }).all();
      if (!hit.length) return false;
      tx.delete(backupCodes).where(eq(backupCodes.userId, userId)).run();
      return true;
    });
  }

  /** Replaces the user's backup codes (the old ones stop working). */
  async replaceBackupCodes(userId: number, codeHashes: string[], now: number, ifPasswordHash?: string, endOthers?: { keep: string | undefined }): Promise<TwoFactorWritten | false> {
    return this.db.transaction((tx) => {
      if (ifPasswordHash !== undefined && !tx.select({ id: users.id }).from(users).where(and(eq(users.id, userId), eq(users.passwordHash, ifPasswordHash))).get()) return false;
      tx.delete(backupCodes).where(eq(backupCodes.userId, userId)).run();
      if (codeHashes.length) tx.insert(backupCodes).values(codeHashes.map((codeHash) => ({ userId, codeHash, createdAt: now }))).run();
      if (!endOthers) return { sessionsEnded: 0 };
      return { sessionsEnded: tx.delete(sessions).where(otherSessions(userId, endOthers.keep)).returning({ h: sessions.idHash }).all().length };
    });
  }

  /** Marks an unused backup code used; false when no such unused code exists. */
  async consumeBackupCode(userId: number, codeHash: string, now: number): Promise<boolean> {
    return this.db.update(backupCodes).set({ usedAt: now })
      .where(and(eq(backupCodes.userId, userId), eq(backupCodes.codeHash, codeHash), isNull(backupCodes.usedAt)))
      .returning({ id: backupCodes.id }).all().length > 0;
  }

  async unusedBackupCodes(userId: number): Promise<number> {
    return this.db.select({ n: count() }).from(backupCodes).where(and(eq(backupCodes.userId, userId), isNull(backupCodes.usedAt))).get()!.n;
  }

  /** Stores a reset token hash and voids every earlier token of the user, while the user is as `basis` saw it (see SecurityStore). */
  async createResetToken(userId: number, tokenHash: string, expiresAt: number, now: number, basis: ResetBasis): Promise<boolean> {
    return this.db.transaction((tx) => {
      if (!tx.select({ id: users.id }).from(users).where(resetBasisHolds(userId, basis)).get()) return false;
      tx.delete(passwordResets).where(eq(passwordResets.userId, userId)).run();
      tx.insert(passwordResets).values({ userId, tokenHash, expiresAt, createdAt: now }).run();
      return true;
    });
  }

  async voidResetTokens(userId: number): Promise<void> {
    this.db.delete(passwordResets).where(eq(passwordResets.userId, userId)).run();
  }

  /** True when `tokenHash` is an unused, unexpired token of `userId` (does not consume it). */
  async resetTokenValid(userId: number, tokenHash: string, now: number): Promise<boolean> {
    return !!this.db.select({ id: passwordResets.id }).from(passwordResets)
      .where(and(eq(passwordResets.userId, userId), eq(passwordResets.tokenHash, tokenHash), isNull(passwordResets.usedAt), gt(passwordResets.expiresAt, now)))
      .get();
  }

  /**
   * Consumes the token and sets the new password hash in one transaction (clearing the lockout);
   * false when the token is unknown, used, expired or of another user.
   */
  async resetPassword(userId: number, tokenHash: string, passwordHash: string, now: number): Promise<boolean> {
    return this.db.transaction((tx) => {
      if (!tx.select({ id: users.id }).from(users).where(and(eq(users.id, userId), eq(users.status, USER_STATUS.enabled))).get()) return false;
      const used = tx.update(passwordResets).set({ usedAt: now })
        .where(and(eq(passwordResets.userId, userId), eq(passwordResets.tokenHash, tokenHash), isNull(passwordResets.usedAt), gt(passwordResets.expiresAt, now)))
        .returning({ id: passwordResets.id }).all().length > 0;
      if (!used) return false;
      tx.update(users).set({ passwordHash, failedLogins: 0, lockCount: 0, lockedUntil: 0, updatedAt: now }).where(eq(users.id, userId)).run();
      return true;
    });
  }

  /**
   * Account recovery: ends every login session and revokes every management access token of the
   * user, except the one credential in `keep` (the session or token making a password change), in
   * one transaction. Returns what was ended.
   */
  async endCredentials(userId: number, keep: { sessionHash?: string; tokenId?: number }, now: number): Promise<CredentialsEnded> {
    return this.db.transaction((tx) => {
      tx.delete(passwordResets).where(eq(passwordResets.userId, userId)).run();
      const s = otherSessions(userId, keep.sessionHash);
      const live = and(eq(accessTokens.userId, userId), isNull(accessTokens.revokedAt));
      const t = keep.tokenId !== undefined ? and(live, ne(accessTokens.id, keep.tokenId)) : live;
      return {
        sessions_ended: tx.delete(sessions).where(s).returning({ h: sessions.idHash }).all().length,
        tokens_revoked: tx.update(accessTokens).set({ revokedAt: now }).where(t).returning({ id: accessTokens.id }).all().length,
      };
    });
  }

  /**
   * Counts one failed login atomically (concurrent wrong attempts cannot overwrite each other's
   * count). At `maxFailures` the account locks for lockSeconds * 2^(locks so far), rounded up to a
   * whole second so a lock never lasts less than configured. Returns the new lock end (0 = none).
   */
  async recordLoginFailure(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<number> {
    return this.db.transaction((tx) => {
      const r = tx.update(users).set({ failedLogins: sql`${users.failedLogins} + 1` })
        .where(eq(users.id, userId)).returning({ failed: users.failedLogins, locks: users.lockCount }).get();
      if (!r || r.failed < policy.maxFailures) return 0;
      const lockedUntil = Math.ceil(nowMs / 1000 + policy.lockSeconds * 2 ** Math.min(r.locks, 16));
      tx.update(users).set({ failedLogins: 0, lockCount: r.locks + 1, lockedUntil }).where(eq(users.id, userId)).run();
      return lockedUntil;
    });
  }

  async claimLoginAttempt(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<LoginClaim> {
    // One synchronous transaction: nothing interleaves between the lock check and the count.
    return this.db.transaction((tx) => {
      const row = tx.select({ lockedUntil: users.lockedUntil }).from(users).where(eq(users.id, userId)).get();
      if (row && row.lockedUntil > nowMs / 1000) return { lockedUntil: row.lockedUntil, locked: false };
      const r = tx.update(users).set({ failedLogins: sql`${users.failedLogins} + 1` })
        .where(eq(users.id, userId)).returning({ failed: users.failedLogins, locks: users.lockCount }).get();
      if (!r || r.failed < policy.maxFailures) return { lockedUntil: 0, locked: false };
      tx.update(users).set({ failedLogins: 0, lockCount: r.locks + 1, lockedUntil: Math.ceil(nowMs / 1000 + policy.lockSeconds * 2 ** Math.min(r.locks, 16)) })
        .where(eq(users.id, userId)).run();
      return { lockedUntil: 0, locked: true };
    });
  }

  async releaseLoginAttempt(userId: number, claim: LoginClaim, policy: { maxFailures: number }): Promise<void> {
    const set = claim.locked
      ? { failedLogins: Math.max(0, policy.maxFailures - 1), lockCount: sql`max(${users.lockCount} - 1, 0)`, lockedUntil: 0 }
      : { failedLogins: sql`max(${users.failedLogins} - 1, 0)` };
    this.db.update(users).set(set as any).where(eq(users.id, userId)).run();
  }
}
