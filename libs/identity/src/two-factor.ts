import { ConfigError, readIntEnv } from '@gw/config';
import { GatewayError, localWindows, type AttemptWindow, type AttemptWindows, type SecretBox } from '@gw/core';
import type { SecurityStore, UserRow, UsersStore } from '@gw/db';
import { generateBackupCodes, hashBackupCode, looksLikeBackupCode } from './backup-codes';
import { wrongCurrentPassword, type CurrentPasswordGuard } from './current-password';
import type { Principal } from './principal';

/** The credential a 2FA check is counted under: the calling session (by its hash) or access token. */
export const credentialKey = (p: Principal): string =>
  (p.via === 'session' ? `s${(p.sessionHash ?? '').slice(0, 16)}` : `t${p.tokenId ?? 0}`);

/** otplib, loaded at the first 2FA operation: most processes never need it (about 3 MB resident each). */
const otplib = () => import('otplib');

export interface TwoFactorConfig {
  /** Shown by authenticator apps next to the account (TOTP_ISSUER). */
  issuer: string;
  /** TOTP_MAX_FAILURES_PER_DAY (20): code checks on the 2FA endpoints per user per 24 h, on top of 10 per 5 minutes. */
  maxFailuresPerDay?: number;
  /** TOTP_MAX_FAILURES_PER_30_DAYS (60): the same per 30 days. */
  maxFailuresPer30Days?: number;
  /** TOTP_LOGIN_MAX_FAILURES_PER_DAY (20): wrong authenticator codes at login per user per 24 h; a reset clears none. */
  maxLoginFailuresPerDay?: number;
}

/** Reads TOTP_ISSUER (default "AI Gateway"; a colon would break the otpauth label) and the long-term guess limits. */
export function twoFactorConfig(env: Record<string, string | undefined>): TwoFactorConfig {
  const issuer = env.TOTP_ISSUER?.trim() || 'AI Gateway';
  if (issuer.length > 64 || issuer.includes(':')) throw new ConfigError('TOTP_ISSUER must be at most 64 characters and contain no ":"');
  return {
    issuer,
    maxFailuresPerDay: readIntEnv(env, 'TOTP_MAX_FAILURES_PER_DAY', 20, 1, 10_000),
    maxFailuresPer30Days: readIntEnv(env, 'TOTP_MAX_FAILURES_PER_30_DAYS', 60, 1, 100_000),
    maxLoginFailuresPerDay: readIntEnv(env, 'TOTP_LOGIN_MAX_FAILURES_PER_DAY', 20, 1, 10_000),
  };
}

export interface TwoFactorStatus { enabled: boolean; backup_codes_remaining: number }
/** New backup codes, and how many other login sessions of the caller were ended with them. */
export interface BackupCodesIssued { backup_codes: string[]; sessions_ended: number }
export interface TwoFactorSetup {
  /** Base32 secret, for typing into an authenticator by hand. Returned only by setup. */
  secret: string;
  otpauth_uri: string;
  /** The string to encode in a QR code (the otpauth URI). */
  qr: string;
}

/** RFC 6238 defaults every authenticator app understands: SHA-1, 6 digits, 30 s steps. */
const PERIOD = 30;
/** Code checks on the 2FA endpoints that may fail per user in 5 minutes before 429. */
const MAX_FAILURES = 10;
const DAY_MS = 86_400_000;
/** One "wrong codes are being tried" notice per user per day at most, however long the guessing goes on. */
const NOTICE_WINDOW_MS = DAY_MS;

/**
 * The 2FA endpoints' 429: the caller is locked out of code checks. `firstInDay` marks the one lockout per user
 * per day that should be told to the owner (a stolen session guessing codes; the route mails the notice).
 */
export class TwoFactorLockout extends GatewayError {
  constructor(wait: number, readonly firstInDay: boolean, message = 'Too many wrong two-factor codes; try again later') {
    super(429, 'too_many_attempts', message, { headers: { 'retry-after': String(wait) } });
  }
}

const userNotFound = (id: number) => new GatewayError(404, 'user_not_found', `No user ${id}`);

const invalidTotp = (message = 'Invalid or already used two-factor code') => new GatewayError(400, 'invalid_totp', message, { param: 'code' });

/**
 * TOTP two-factor authentication with single-use backup codes. Secrets are sealed with the
 * configured SecretBox; a code's time step is claimed atomically, so a code works once.
 */
export class TwoFactorService {
  /**
   * Shortest first: 10 per 5 minutes alone allowed ~86,000 guesses a month against ~3 valid TOTP codes per check
   * (a stolen session guessing for weeks had a real chance); the day and 30-day caps bring that to 60 a month.
   */
  private readonly tiers: Array<{ window: AttemptWindow; limit: number }>;
  private readonly noticed: AttemptWindow;
  /** Wrong authenticator codes at login per user (see checkLoginCode). */
  private readonly loginDay: AttemptWindow;

  constructor(
    private readonly users: UsersStore,
    private readonly repo: SecurityStore,
    private readonly box: SecretBox,
    private readonly cfg: TwoFactorConfig,
    /** The shared current-password check (and its attempt limit) that enable and new backup codes need. */
    private readonly currentPassword: CurrentPasswordGuard,
    private readonly clock: () => number = Date.now,
    windows: AttemptWindows = localWindows,
  ) {
    this.tiers = [
      // '2fa' is the name the 5-minute window always had (shared store keys stay what they were).
      { window: windows('2fa', 5 * 60_000, clock), limit: MAX_FAILURES },
      { window: windows('2fa-day', DAY_MS, clock), limit: cfg.maxFailuresPerDay ?? 20 },
      { window: windows('2fa-30d', 30 * DAY_MS, clock), limit: cfg.maxFailuresPer30Days ?? 60 },
    ];
    this.noticed = windows('2fa-notice', NOTICE_WINDOW_MS, clock);
    this.loginDay = windows('2fa-login-day', DAY_MS, clock);
  }

  async status(userId: number): Promise<TwoFactorStatus> {
    const u = await this.mustUser(userId);
    return { enabled: u.totpEnabled, backup_codes_remaining: u.totpEnabled ? await this.repo.unusedBackupCodes(userId) : 0 };
  }

  /** Creates a new pending secret (replacing an unconfirmed one); 2FA is off until `enable`. */
  async setup(userId: number): Promise<TwoFactorSetup> {
    const u = await this.mustUser(userId);
    if (u.totpEnabled) throw new GatewayError(409, 'totp_already_enabled', 'Two-factor authentication is already on; disable it first to set up a new authenticator');
    const { generateSecret, generateURI } = await otplib();
    const secret = generateSecret({ length: 20 });
    if (!(await this.repo.setPendingTotp(userId, this.box.seal(secret), this.nowSec()))) {
      // Nothing written: 2FA turned on meanwhile, or the account deleted meanwhile (answered as for a user gone before).
      await this.mustUser(userId);
      throw new GatewayError(409, 'totp_already_enabled', 'Two-factor authentication is already on');
    }
    const uri = generateURI({ issuer: this.cfg.issuer, label: u.username, secret, period: PERIOD });
    return { secret, otpauth_uri: uri, qr: uri };
  }

  /**
   * Confirms the pending secret with the current password and a current code, turns 2FA on and returns the
   * backup codes (shown once). Every other login session of the user ends: they were opened without the
   * second factor (access tokens stay: they are listed, named, and a password change revokes them). The password is what keeps a stolen session from turning 2FA on with the
   * thief's own authenticator (locking the owner out and taking the backup codes).
   */
  async enable(p: Principal, currentPassword: string, code: string): Promise<BackupCodesIssued> {
    const userId = p.user.id;
    const u = await this.mustUser(userId);
    if (u.totpEnabled) throw new GatewayError(409, 'totp_already_enabled', 'Two-factor authentication is already on');
    if (!u.totpSecret) throw new GatewayError(400, 'totp_not_set_up', 'Call POST /api/user/2fa/setup first', { param: 'code' });
    await this.currentPassword.require(userId, currentPassword, u.passwordHash);
    await this.guard(userId, credentialKey(p));
    const step = await this.matchTotp(u, code);
    const codes = generateBackupCodes();
    // Only the secret the code was checked against is turned on: a setup sent meanwhile (a stolen session's,
    // while this request checked the password) must not make its own authenticator the one 2FA trusts.
    // Nor after a password change that ended this caller's session while its password was checked: an intruder's
    // authenticator turned on then would lock the owner, who just changed the password, out of every login.
    // The other sessions end in the same write: ended after it, a password change committed in between (the owner's,
    // keeping the owner's session) would have that session ended by this call, which the change had outrun.
    const written = step === null ? false : await this.repo.enableTotp(userId, step, codes.map((c) => hashBackupCode(userId, c)), this.nowSec(), u.totpSecret, u.passwordHash, p.sessionHash);
    if (!written) {
      const after = await this.users.byId(userId);
      if (step !== null && !after) throw userNotFound(userId);
      if (step !== null && after && after.passwordHash !== u.passwordHash) throw wrongCurrentPassword();
      if (step !== null && after && !after.totpEnabled && after.totpSecret !== u.totpSecret) {
        throw new GatewayError(409, 'totp_setup_changed', 'Another 2FA setup replaced the pending secret while this one was confirmed; nothing was turned on. Set up again');
      }
      throw await this.failed(userId);
    }
    await this.cleared(userId, credentialKey(p));
    return { backup_codes: codes, sessions_ended: written.sessionsEnded };
  }

  /**
   * Disable 2FA: a current TOTP code or an unused backup code of the caller (the body is fixed by the spec:
   * no password). Other sessions are left alone: they were all made with the second factor, and a thief who
   * holds a code gains nothing by logging the owner out.
   */
  async disable(userId: number, code: string, credential = ''): Promise<void> {
    const u = await this.mustEnabled(userId);
    await this.guard(userId, credential);
    if (!(await this.consume(u, code))) throw await this.failed(userId, 'Invalid or already used two-factor or backup code');
    await this.repo.disableTotp(userId, this.nowSec());
    await this.cleared(userId, credential);
  }

  /**
   * New backup codes (the old set stops working); needs the current password and a current TOTP code, not a
   * backup code. Every other login session of the user ends, since a leaked backup code is a usual reason to
   * ask for new ones and a login made with one may still be open.
   */
  async regenerateBackupCodes(p: Principal, currentPassword: string, code: string): Promise<BackupCodesIssued> {
    const userId = p.user.id;
    const u = await this.mustEnabled(userId);
    await this.currentPassword.require(userId, currentPassword, u.passwordHash);
    await this.guard(userId, credentialKey(p));
    const step = await this.matchTotp(u, code);
    if (step === null || !(await this.repo.claimTotpStep(userId, step))) throw await this.failed(userId, 'A current, unused authenticator code is required');
    const codes = generateBackupCodes();
    // Only over the password checked above: written after a password change that ended this caller's session, they
    // would void the owner's codes and end the owner's sessions. The other sessions end in the same write (see enable).
    const written = await this.repo.replaceBackupCodes(userId, codes.map((c) => hashBackupCode(userId, c)), this.nowSec(), u.passwordHash, { keep: p.sessionHash });
    if (!written) throw wrongCurrentPassword();
    await this.cleared(userId, credentialKey(p));
    return { backup_codes: codes, sessions_ended: written.sessionsEnded };
  }

  /**
   * Login's second factor (LoginService.secondFactor): a TOTP code or an unused backup code,
   * consumed on success. Failures are counted by the login lockout, not here.
   */
  async checkLoginCode(user: UserRow, code: string): Promise<boolean> {
    const u = await this.users.byId(user.id);
    if (!u?.totpEnabled) return false;
    if (looksLikeBackupCode(code)) return this.consume(u, code);
    // Authenticator codes at login are capped per user and day, and a password reset clears none of it: the login
    // lockout alone gave 5 guesses per lock, and every reset cleared the lock, so whoever reads the owner's mail
    // could reset and guess again (5 reset mails an hour: ~18,000 guesses a month, about a 5% chance at ~3 valid
    // codes in a million). Only an authenticator code passes the cap's check: past it the owner still logs in with
    // a backup code (~50 bits; guessing those is hopeless). Checked before the code and counted after a wrong one:
    // the login lockout already lets at most a handful of checks run at once per account.
    const key = this.key(u.id);
    const limit = this.cfg.maxLoginFailuresPerDay ?? 20;
    if ((await this.loginDay.count(key)) >= limit) {
      const wait = (await this.loginDay.hit(key, limit)) || 1;
      throw new TwoFactorLockout(wait, (await this.noticed.hit(`${key}:login`, 1)) === 0,
        'Too many wrong two-factor codes at login for this account today; log in with a backup code or try again later');
    }
    // The session this login opens has counts of its own (see guard): nothing here clears another credential's.
    const ok = await this.consume(u, code);
    if (!ok) await this.loginDay.hit(key, limit);
    return ok;
  }

  /**
   * Admin reset of another user's 2FA (lost phone and codes): only for users whose role is below
   * the caller's, so nobody resets their own (use disable) and root's can only be reset by itself.
   */
  async adminReset(actor: UserRow, targetId: number): Promise<void> {
    const target = await this.users.byId(targetId);
    if (!target) throw new GatewayError(404, 'user_not_found', `No user ${targetId}`, { param: 'id' });
    const refused = () => new GatewayError(403, 'insufficient_role', 'You can only reset two-factor authentication of users with a lower role than yours', { param: 'id' });
    if (target.role >= actor.role) throw refused();
    // Both roles are checked again in the write, as it reads them: neither a promotion of the target nor a demotion
    // of the actor landing since the reads above may let an admin turn off a peer's 2FA. Nothing written: either
    // changed meanwhile (403), or the target deleted meanwhile (404).
    if (!(await this.repo.disableTotp(targetId, this.nowSec(), actor.id))) {
      if (await this.users.byId(targetId)) throw refused();
      throw new GatewayError(404, 'user_not_found', `No user ${targetId}`, { param: 'id' });
    }
  }

  /** A TOTP or backup code, used up when it matches. */
  private async consume(u: UserRow, code: string): Promise<boolean> {
    if (looksLikeBackupCode(code)) return this.repo.consumeBackupCode(u.id, hashBackupCode(u.id, code), this.nowSec());
    const step = await this.matchTotp(u, code);
    return step !== null && (await this.repo.claimTotpStep(u.id, step));
  }

  /** The time step `code` belongs to (±1 step, after the last accepted one), or null. */
  private async matchTotp(u: UserRow, code: string): Promise<number | null> {
    const token = code.replace(/\s/g, '');
    // otplib throws on a wrong length or non-digits; those are simply wrong codes.
    if (!/^\d{6}$/.test(token) || !u.totpSecret) return null;
    const secret = this.box.open(u.totpSecret);
    const { verify } = await otplib();
    try {
      const r = await verify({
        secret, token, period: PERIOD, epoch: Math.floor(this.clock() / 1000), epochTolerance: PERIOD,
        ...(u.totpLastStep > 0 ? { afterTimeStep: u.totpLastStep } : {}),
      });
      return r.valid && 'timeStep' in r ? r.timeStep : null;
    } catch {
      // e.g. AfterTimeStepRangeExceededError when the last accepted step is ahead of the clock.
      return null;
    }
  }

  private key(userId: number, credential = '') { return credential ? `u${userId}:${credential}` : `u${userId}`; }

  /**
   * Backup codes have ~50 bits and TOTP 20: stop guessing on the 2FA endpoints early. Each check is claimed
   * in the window before the code is read (a success clears it): counting failures afterwards let parallel
   * guesses all pass a count that none of them had raised yet (on a shared window, a Redis round trip each).
   * Counted per credential (the session or access token calling): a stolen one is capped however often the owner
   * logs in (a login used to clear the account's counts, giving the thief a new day's guesses each time), and its
   * lockout is not the owner's, whose other sessions and tokens keep their own checks. A thief cannot open more:
   * a session needs both factors and a token the password.
   */
  private async guard(userId: number, credential: string): Promise<void> {
    for (const { window, limit } of this.tiers) {
      // Shortest first, stopping at the first refusal: a check refused by the 5-minute window is not one the
      // longer windows should count.
      const wait = await window.hit(this.key(userId, credential), limit);
      // One notice per user (not per credential) a day.
      if (wait) throw new TwoFactorLockout(wait, (await this.noticed.hit(this.key(userId), 1)) === 0);
    }
  }

  /** A right code: the credential's windows start again, and so does the user's notice. */
  private async cleared(userId: number, credential: string): Promise<void> {
    for (const { window } of this.tiers) await window.reset(this.key(userId, credential));
    await this.noticed.reset(this.key(userId));
  }

  private async failed(_userId: number, message?: string): Promise<GatewayError> {
    return invalidTotp(message);
  }

  private async mustUser(userId: number): Promise<UserRow> {
    const u = await this.users.byId(userId);
    if (!u) throw userNotFound(userId);
    return u;
  }

  private async mustEnabled(userId: number): Promise<UserRow> {
    const u = await this.mustUser(userId);
    if (!u.totpEnabled) throw new GatewayError(400, 'totp_not_enabled', 'Two-factor authentication is not on');
    return u;
  }

  private nowSec() { return Math.floor(this.clock() / 1000); }
}
