import { and, count, eq, gt, isNull, lt, ne, sql } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { USER_STATUS, accessTokens, backupCodes, passwordResets, sessions, users } from '../schema-pg';
import type { CredentialsEnded, LoginClaim, ResetBasis, TwoFactorWritten } from '../repos/security';
import { otherSessions } from './sessions';
import { belowActor } from '../repos/actor-guard';

/**
 * PostgreSQL twin of ../repos/security.ts (same methods, async). Every "use once" operation stays a
 * single conditional UPDATE: under READ COMMITTED a concurrent UPDATE of the same row waits for the
 * first and re-checks the WHERE clause, so only one succeeds.
 */
export class PgSecurityRepo {
  constructor(private readonly db: PgDb) {}

  async setPendingTotp(userId: number, sealed: string, now: number): Promise<boolean> {
    return (await this.db.update(users).set({ totpSecret: sealed, updatedAt: now })
      .where(and(eq(users.id, userId), eq(users.totpEnabled, false))).returning({ id: users.id })).length > 0;
  }

  async claimTotpStep(userId: number, step: number): Promise<boolean> {
    return (await this.db.update(users).set({ totpLastStep: step })
      .where(and(eq(users.id, userId), lt(users.totpLastStep, step))).returning({ id: users.id })).length > 0;
  }

  async enableTotp(userId: number, step: number, codeHashes: string[], now: number, sealed: string, passwordHash: string, keepSessionHash?: string): Promise<TwoFactorWritten | false> {
    return this.db.transaction(async (tx) => {
      const done = (await tx.update(users).set({ totpEnabled: true, totpLastStep: step, updatedAt: now })
        .where(and(eq(users.id, userId), eq(users.totpEnabled, false), lt(users.totpLastStep, step), eq(users.totpSecret, sealed), eq(users.passwordHash, passwordHash)))
        .returning({ id: users.id })).length > 0;
      if (!done) return false;
      await tx.delete(backupCodes).where(eq(backupCodes.userId, userId));
      if (codeHashes.length) await tx.insert(backupCodes).values(codeHashes.map((codeHash) => ({ userId, codeHash, createdAt: now })));
      // In the transaction that holds the user row: a password change waits for it, so the session it keeps is never ended here.
      return { sessionsEnded: (await tx.delete(sessions).where(otherSessions(userId, keepSessionHash)).returning({ h: sessions.idHash })).length };
    });
  }

  async disableTotp(userId: number, now: number, actorId?: number): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      // The UPDATE locks the row and judges the role as committed: a promotion either landed first (nothing written)
      // or waits for this commit. The actor's role is read by the same statement: a demotion committed before it is seen.
      const below = actorId === undefined ? undefined : belowActor(users.role, actorId);
      const hit = await tx.update(users).set({ totpEnabled: false, totpSecret: null, updatedAt: now }).where(and(eq(users.id, userId), below)).returning({ id: users.id });
      if (!hit.length) return false;
      await tx.delete(backupCodes).where(eq(backupCodes.userId, userId));
      return true;
    });
  }

  /** With `ifPasswordHash`, the user's row is locked while it is checked: a password change waits for this write, or this one sees it. */
  async replaceBackupCodes(userId: number, codeHashes: string[], now: number, ifPasswordHash?: string, endOthers?: { keep: string | undefined }): Promise<TwoFactorWritten | false> {
    return this.db.transaction(async (tx) => {
      if (ifPasswordHash !== undefined) {
        const [same] = await tx.select({ id: users.id }).from(users).where(and(eq(users.id, userId), eq(users.passwordHash, ifPasswordHash))).for('update');
        if (!same) return false;
      }
      await tx.delete(backupCodes).where(eq(backupCodes.userId, userId));
      if (codeHashes.length) await tx.insert(backupCodes).values(codeHashes.map((codeHash) => ({ userId, codeHash, createdAt: now })));
      if (!endOthers) return { sessionsEnded: 0 };
      return { sessionsEnded: (await tx.delete(sessions).where(otherSessions(userId, endOthers.keep)).returning({ h: sessions.idHash })).length };
    });
  }

  async consumeBackupCode(userId: number, codeHash: string, now: number): Promise<boolean> {
    return (await this.db.update(backupCodes).set({ usedAt: now })
      .where(and(eq(backupCodes.userId, userId), eq(backupCodes.codeHash, codeHash), isNull(backupCodes.usedAt)))
      .returning({ id: backupCodes.id })).length > 0;
  }

  async unusedBackupCodes(userId: number): Promise<number> {
    return (await this.db.select({ n: count() }).from(backupCodes).where(and(eq(backupCodes.userId, userId), isNull(backupCodes.usedAt))))[0]!.n;
  }

  async createResetToken(userId: number, tokenHash: string, expiresAt: number, now: number, basis: ResetBasis): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      // Locked, so a disable, password change or new address either committed before this read (seen: nothing
      // written) or waits for this commit (and voids the token).
      const holds = and(eq(users.id, userId), eq(users.status, USER_STATUS.enabled), eq(users.passwordHash, basis.passwordHash), eq(users.email, basis.email));
      if (!(await tx.select({ id: users.id }).from(users).where(holds).for('update')).length) return false;
      await tx.delete(passwordResets).where(eq(passwordResets.userId, userId));
      await tx.insert(passwordResets).values({ userId, tokenHash, expiresAt, createdAt: now });
      return true;
    });
  }

  async voidResetTokens(userId: number): Promise<void> {
    await this.db.delete(passwordResets).where(eq(passwordResets.userId, userId));
  }

  async resetTokenValid(userId: number, tokenHash: string, now: number): Promise<boolean> {
    return (await this.db.select({ id: passwordResets.id }).from(passwordResets)
      .where(and(eq(passwordResets.userId, userId), eq(passwordResets.tokenHash, tokenHash), isNull(passwordResets.usedAt), gt(passwordResets.expiresAt, now)))
      .limit(1)).length > 0;
  }

  async resetPassword(userId: number, tokenHash: string, passwordHash: string, now: number): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      if (!(await enabledLocked(tx, userId))) return false;
      const used = (await tx.update(passwordResets).set({ usedAt: now })
        .where(and(eq(passwordResets.userId, userId), eq(passwordResets.tokenHash, tokenHash), isNull(passwordResets.usedAt), gt(passwordResets.expiresAt, now)))
        .returning({ id: passwordResets.id })).length > 0;
      if (!used) return false;
      await tx.update(users).set({ passwordHash, failedLogins: 0, lockCount: 0, lockedUntil: 0, updatedAt: now }).where(eq(users.id, userId));
      return true;
    });
  }

  async endCredentials(userId: number, keep: { sessionHash?: string; tokenId?: number }, now: number): Promise<CredentialsEnded> {
    return this.db.transaction(async (tx) => {
      // Pending reset links go with the credentials (see SecurityStore.endCredentials).
      await tx.delete(passwordResets).where(eq(passwordResets.userId, userId));
      const s = otherSessions(userId, keep.sessionHash);
      const live = and(eq(accessTokens.userId, userId), isNull(accessTokens.revokedAt));
      const t = keep.tokenId !== undefined ? and(live, ne(accessTokens.id, keep.tokenId)) : live;
      const ended = await tx.delete(sessions).where(s).returning({ h: sessions.idHash });
      const revoked = await tx.update(accessTokens).set({ revokedAt: now }).where(t).returning({ id: accessTokens.id });
      return { sessions_ended: ended.length, tokens_revoked: revoked.length };
    });
  }

  /** The first UPDATE locks the user row until commit, so the read-then-lock step cannot interleave with another failure. */
  async recordLoginFailure(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<number> {
    return this.db.transaction(async (tx) => {
      const [r] = await tx.update(users).set({ failedLogins: sql`${users.failedLogins} + 1` })
        .where(eq(users.id, userId)).returning({ failed: users.failedLogins, locks: users.lockCount });
      if (!r || r.failed < policy.maxFailures) return 0;
      const lockedUntil = Math.ceil(nowMs / 1000 + policy.lockSeconds * 2 ** Math.min(r.locks, 16));
      await tx.update(users).set({ failedLogins: 0, lockCount: r.locks + 1, lockedUntil }).where(eq(users.id, userId));
      return lockedUntil;
    });
  }

  /** The row lock (SELECT … FOR UPDATE) orders concurrent claims: each sees the counts and lock of those before it. */
  async claimLoginAttempt(userId: number, policy: { maxFailures: number; lockSeconds: number }, nowMs: number): Promise<LoginClaim> {
    return this.db.transaction(async (tx) => {
      const [row] = await tx.select({ lockedUntil: users.lockedUntil, failed: users.failedLogins, locks: users.lockCount })
        .from(users).where(eq(users.id, userId)).for('update');
      if (!row) return { lockedUntil: 0, locked: false };
      if (row.lockedUntil > nowMs / 1000) return { lockedUntil: row.lockedUntil, locked: false };
      const failed = row.failed + 1;
      if (failed < policy.maxFailures) {
        await tx.update(users).set({ failedLogins: failed }).where(eq(users.id, userId));
        return { lockedUntil: 0, locked: false };
      }
      const lockedUntil = Math.ceil(nowMs / 1000 + policy.lockSeconds * 2 ** Math.min(row.locks, 16));
      await tx.update(users).set({ failedLogins: 0, lockCount: row.locks + 1, lockedUntil }).where(eq(users.id, userId));
      return { lockedUntil: 0, locked: true };
    });
  }

  async releaseLoginAttempt(userId: number, claim: LoginClaim, policy: { maxFailures: number }): Promise<void> {
    const set = claim.locked
      ? { failedLogins: Math.max(0, policy.maxFailures - 1), lockCount: sql`greatest(${users.lockCount} - 1, 0)`, lockedUntil: 0 }
      : { failedLogins: sql`greatest(${users.failedLogins} - 1, 0)` };
    await this.db.update(users).set(set as any).where(eq(users.id, userId));
  }
}

/** Whether the user is enabled, its row locked until the transaction ends (a concurrent disable waits for it). */
async function enabledLocked(tx: Parameters<Parameters<PgDb['transaction']>[0]>[0], userId: number): Promise<boolean> {
  return (await tx.select({ id: users.id }).from(users).where(and(eq(users.id, userId), eq(users.status, USER_STATUS.enabled))).for('update')).length > 0;
}
