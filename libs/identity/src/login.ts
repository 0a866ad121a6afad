import { GatewayError, localWindows, randomToken, sha256Hex, type AttemptWindow, type AttemptWindows } from '@gw/core';
import type { SecurityStore, SessionsStore, UsersStore, UserRow } from '@gw/db';
import { USER_STATUS, isForeignKeyViolation } from '@gw/db';
import { attemptKeyOfIp } from './ip-allow';
import { passwordGate } from './password-gate';
import { dummyPasswordHash, verifyPasswordHeld } from './passwords';
import { UnknownNameLockout, type NameLockouts } from './unknown-lockout';

export interface LoginPolicy {
  maxFailures: number;
  lockSeconds: number;
  ipPerMinute: number;
  sessionTtlSeconds: number;
  /** Logins (right or wrong) per username per minute, before the password gate; unset: no such limit. */
  checksPerMinute?: number;
}

/**
 * Checks a second factor for a user with 2FA on. Returns true when `code` is a valid, unreplayed
 * TOTP or unused backup code (and consumes it). Provided by the two-factor module.
 */
export type SecondFactorCheck = (user: UserRow, code: string) => Promise<boolean>;

export interface LoginInput {
  username: string;
  password: string;
  totpCode?: string;
  ip: string;
  userAgent: string;
}

/**
 * Password login with lockout: `maxFailures` wrong passwords or codes lock the account for
 * lockSeconds * 2^(locks so far); the per-IP window stops spraying across many accounts.
 *
 * No answer tells whether a username exists or whether a password is right unless the login
 * succeeds: an unknown name is counted and locked like a real one (UnknownNameLockout), and a
 * disabled account answers like a wrong password whatever password is given (and counts as one).
 */
export class LoginService {
  private readonly ipWindow: AttemptWindow;
  private readonly nameWindow: AttemptWindow;
  private readonly unknownNames: NameLockouts;
  secondFactor: SecondFactorCheck | null = null;

  constructor(
    private readonly users: UsersStore,
    private readonly sessions: SessionsStore,
    private readonly policy: LoginPolicy,
    private readonly security: SecurityStore,
    private readonly clock: () => number = Date.now,
    /** Where the per-address window counts (shared by every node in PostgreSQL mode). */
    windows: AttemptWindows = localWindows,
    /** Where unknown usernames are counted (every node's Redis in PostgreSQL mode). */
    unknownNames?: NameLockouts,
  ) {
    this.ipWindow = windows('login-ip', 60_000, clock);
    this.nameWindow = windows('login-name', 60_000, clock);
    this.unknownNames = unknownNames ?? new UnknownNameLockout(policy);
  }

  async login(input: LoginInput): Promise<{ sessionId: string; user: UserRow; expiresAt: number }> {
    const wait = await this.ipWindow.hit(attemptKeyOfIp(input.ip), this.policy.ipPerMinute);
    if (wait) throw new GatewayError(429, 'too_many_attempts', 'Too many login attempts from this address', { headers: { 'retry-after': String(wait) } });
    // Per username, right passwords included, counted whether or not the name exists (no oracle): the lockout
    // stops guessing but is cleared by every right password, so without this one account could keep the
    // password gate busy from many addresses.
    if (this.policy.checksPerMinute !== undefined) {
      const w = await this.nameWindow.hit(sha256Hex(input.username), this.policy.checksPerMinute);
      if (w) throw new GatewayError(429, 'too_many_password_checks', 'Too many logins for this username; try again later', { headers: { 'retry-after': String(w) } });
    }
    // The slot is taken before the account is read or any attempt counted: a busy refusal is the same for every
    // name and never counts as a failed login of the real owner.
    const release = await passwordGate().acquire();
    let user: UserRow | undefined;
    let claim: Awaited<ReturnType<SecurityStore['claimLoginAttempt']>>;
    let passwordOk: boolean;
    let now: number;
    try {
      const nowMs = this.clock();
      now = Math.floor(nowMs / 1000);
      user = await this.users.byUsername(input.username);
      if (!user) {
        // Claimed before the (dummy) check like a real account's attempt, so a burst is answered the same way.
        assertNotLocked(await this.unknownNames.claim(input.username, nowMs), now);
        await verifyPasswordHeld(input.password, await dummyPasswordHash());
        throw invalidCredentials();
      }
      assertNotLocked(user.lockedUntil, now);
      // Claimed (counted as a failure) before the slow check: parallel guesses cannot all pass a lock read before
      // any of them failed. A success below clears the count.
      claim = await this.security.claimLoginAttempt(user.id, this.policy, nowMs);
      assertNotLocked(claim.lockedUntil, now);
      passwordOk = await verifyPasswordHeld(input.password, user.passwordHash);
    } finally {
      release();
    }
    if (!passwordOk || user.status !== USER_STATUS.enabled) throw invalidCredentials();
    if (user.totpEnabled) {
      if (!input.totpCode) {
        // The right password, the second step to come: not a failure.
        await this.security.releaseLoginAttempt(user.id, claim, this.policy);
        throw new GatewayError(401, 'totp_required', 'Two-factor code required', { param: 'totp_code' });
      }
      const okCode = this.secondFactor ? await this.secondFactor(user, input.totpCode) : false;
      if (!okCode) throw new GatewayError(401, 'invalid_totp', 'Invalid two-factor code', { param: 'totp_code' });
    }
    await this.users.update(user.id, { failedLogins: 0, lockCount: 0, lockedUntil: 0 });
    const sessionId = randomToken(43);
    const expiresAt = now + this.policy.sessionTtlSeconds;
    const idHash = sha256Hex(sessionId);
    await (async () => this.sessions.createSession({
      idHash, userId: user.id, createdAt: now, expiresAt,
      ip: input.ip.slice(0, 64), userAgent: input.userAgent.slice(0, 256),
    }))().catch((err: unknown) => {
      // The account was deleted while the password was checked: as for one changed then (below), not a 500.
      throw isForeignKeyViolation(err, 'sessions_user_id_users_id_fk') ? invalidCredentials() : err;
    });
    // The password was checked against the row read before the slow hash check. If it changed meanwhile (a change,
    // a reset, an admin), that change may have ended every session before this one was written, and this one,
    // opened with the old password, would outlive it; likewise 2FA turned on meanwhile (this login had no code).
    // Read again after the write: a change that lands later still finds and ends this session, since each of them
    // writes the account first and ends its sessions after.
    const after = await this.users.byId(user.id);
    if (!after || after.passwordHash !== user.passwordHash || after.status !== USER_STATUS.enabled || (after.totpEnabled && !user.totpEnabled)) {
      await this.sessions.deleteSession(idHash);
      throw invalidCredentials();
    }
    return { sessionId, user, expiresAt };
  }

}

function assertNotLocked(lockedUntil: number, now: number): void {
  if (lockedUntil > now) {
    throw new GatewayError(429, 'account_locked', 'Account temporarily locked after repeated failed logins', {
      headers: { 'retry-after': String(lockedUntil - now) },
    });
  }
}

const invalidCredentials = () => new GatewayError(401, 'invalid_credentials', 'Invalid username or password');
