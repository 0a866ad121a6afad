import { ConfigError, readIntEnv } from '@gw/config';
import { GatewayError, localWindows, randomToken, sha256Hex, stdLogger, type AttemptWindow, type AttemptWindows, type Logger } from '@gw/core';
import { USER_STATUS, type SecurityStore, type UserRow, type UsersStore } from '@gw/db';
import type { MailMessage, Mailer } from './mailer';
import { attemptKeyOfIp } from './ip-allow';
import { JobQueue, type JobQueueOptions } from './job-queue';
import { PASSWORD_MAX, PASSWORD_MIN, generatePassword, hashPassword } from './passwords';

export interface PasswordResetConfig {
  /** RESET_TOKEN_TTL_SECONDS (default 900 = 15 minutes). */
  ttlSeconds: number;
  /** PUBLIC_URL: the gateway's address as users reach it, used in the e-mailed link. */
  publicUrl: string;
  /** RESET_IP_PER_MINUTE: reset requests and attempts per client address per minute. */
  ipPerMinute: number;
  /** RESET_EMAILS_PER_HOUR: reset e-mails one account is sent per hour, however its address is spelled and from however many client addresses. */
  emailsPerHour: number;
}

/** Reads RESET_TOKEN_TTL_SECONDS, RESET_IP_PER_MINUTE, RESET_EMAILS_PER_HOUR and PUBLIC_URL (default http://localhost:<PORT>). */
export function passwordResetConfig(env: Record<string, string | undefined>): PasswordResetConfig {
  const raw = env.PUBLIC_URL?.trim() || `http://localhost:${env.PORT?.trim() || '3000'}`;
  let url: URL;
  try { url = new URL(raw); } catch { throw new ConfigError(`PUBLIC_URL must be an absolute http(s) URL, got "${raw}"`); }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError(`PUBLIC_URL must be an http(s) URL, got "${raw}"`);
  return {
    ttlSeconds: readIntEnv(env, 'RESET_TOKEN_TTL_SECONDS', 900, 1, 7 * 86400),
    publicUrl: raw.replace(/\/+$/, ''),
    ipPerMinute: readIntEnv(env, 'RESET_IP_PER_MINUTE', 10, 1, 100000),
    emailsPerHour: readIntEnv(env, 'RESET_EMAILS_PER_HOUR', 5, 1, 100000),
  };
}

export interface ResetInput { email: string; token: string; password?: string }

const invalidToken = () => new GatewayError(400, 'invalid_reset_token', 'Invalid or expired password reset token', { param: 'token' });

/**
 * Password reset by e-mailed single-use token. The request answers the same whether or not the
 * address is registered, in the same time: the request path only checks the rate limit and queues
 * the address. Looking it up, writing the token and sending the e-mail (with retries) happen in a
 * background queue after the response, so no step that depends on the address runs before it.
 */
export class PasswordResetService {
  private readonly ipWindow: AttemptWindow;
  /** Reset e-mails per account: the per-IP limit alone let anyone with a few addresses flood one inbox. */
  private readonly mailWindow: AttemptWindow;
  private readonly queue: JobQueue;

  constructor(
    private readonly users: UsersStore,
    private readonly repo: SecurityStore,
    private readonly mailer: Mailer,
    /** Ends every session and revokes every access token of the user (SecurityStore.endCredentials). */
    private readonly endCredentials: (userId: number) => Promise<unknown>,
    private readonly cfg: PasswordResetConfig,
    private readonly log: Logger = stdLogger,
    private readonly clock: () => number = Date.now,
    queueOptions: Omit<JobQueueOptions, 'log'> = {},
    windows: AttemptWindows = localWindows,
  ) {
    this.ipWindow = windows('reset-ip', 60_000, clock);
    this.mailWindow = windows('reset-mail', 3_600_000, clock);
    this.queue = new JobQueue({ ...queueOptions, log });
  }

  /** `POST /api/user/reset/request`: queues an e-mailed token for `email` (sent when it belongs to an enabled user). */
  async request(email: string, ip: string): Promise<void> {
    await this.limit(ip);
    const requestedAt = this.nowSec();
    let message: { userId: number; mail: MailMessage } | null | undefined;
    this.queue.enqueue('password reset e-mail', async () => {
      // First run: look up and write the token once; retries only resend the same message.
      if (message === undefined) message = await this.prepare(email.trim(), requestedAt);
      if (!message) return;
      try {
        await this.mailer.send(message.mail);
      } catch (err) {
        throw new Error(`to user ${message.userId}: ${err instanceof Error ? err.message : String(err)}`);
      }
    });
  }

  /** Resolves once queued reset e-mails are handled (tests; shutdown uses close()). */
  idle(): Promise<void> { return this.queue.idle(); }

  /** Stops the background queue; queued e-mails get `graceMs` to go out (the rest is logged as not done). */
  close(graceMs = 0): Promise<void> { return this.queue.close(graceMs); }

  /** Writes a token for an enabled user with this address and composes the e-mail; null otherwise. */
  private async prepare(email: string, now: number): Promise<{ userId: number; mail: MailMessage } | null> {
    const user = await this.users.byEmail(email);
    if (!user || user.status !== USER_STATUS.enabled || !user.email) return null;
    if (!this.mailer.configured) {
      this.log.warn('password_reset.mail_off', { user: user.id, msg: 'mail is not configured (set SMTP_HOST); no e-mail sent' });
      return null;
    }
    // Counted per account after the response (the answer stays the same for every address), and before a token
    // is written: a throttled request leaves the link already sent working.
    const wait = await this.mailWindow.hit(`u${user.id}`, this.cfg.emailsPerHour);
    if (wait) {
      this.log.warn('password_reset.throttled', { user: user.id, retry_after: wait, msg: `more than ${this.cfg.emailsPerHour} reset e-mails within an hour; no e-mail sent` });
      return null;
    }
    const token = randomToken(43);
    const to = user.email;
    // Written only while the user is still enabled with the password and address read above, checked in the write:
    // a disable, password change or new address landing since that lookup (the throttle awaits between) voided the
    // links pending then, and would otherwise be followed by a fresh one, mailed for the state the owner replaced.
    const basis = { passwordHash: user.passwordHash, email: to };
    if (!(await this.repo.createResetToken(user.id, resetTokenHash(token, to), now + this.cfg.ttlSeconds, now, basis))) return null;
    const link = `${this.cfg.publicUrl}/user/reset?email=${encodeURIComponent(to)}&token=${token}`;
    const minutes = Math.max(1, Math.round(this.cfg.ttlSeconds / 60));
    const text = [
      `Someone (hopefully you) asked to reset the password of the account "${user.username}" at ${this.cfg.publicUrl}.`,
      '', `Open this link within ${minutes} minute${minutes === 1 ? '' : 's'} to choose a new password:`, link,
      '', `Or send POST ${this.cfg.publicUrl}/api/user/reset with {"email": "${to}", "token": "${token}"}.`,
      '', 'The token works once. If you did not ask for this, ignore this e-mail: your password stays as it is.',
    ].join('\n');
    return { userId: user.id, mail: { to, subject: 'Reset your password', text } };
  }

  /**
   * Reset Password: consumes the token and sets `password` (or a generated one, returned),
   * clears the lockout, ends every session and revokes every access token. Bad, used, expired or foreign tokens: the same 400.
   * `user` is the account as read before the reset (its address is the one the link went to), for the notice.
   */
  async reset(input: ResetInput, ip: string): Promise<{ password?: string; user: UserRow }> {
    await this.limit(ip);
    if (input.password !== undefined && (input.password.length < PASSWORD_MIN || input.password.length > PASSWORD_MAX)) {
      throw new GatewayError(400, 'invalid_password', `Password must be ${PASSWORD_MIN} to ${PASSWORD_MAX} characters`, { param: 'password' });
    }
    const user = await this.users.byEmail(input.email.trim());
    const usable = user && user.status === USER_STATUS.enabled && user.email ? user : null;
    // The token is looked up whether or not the address is an account's (user id 0 matches no row), so a wrong
    // token costs the same database round trip for a registered address as for an unknown one: the answer's timing
    // must not tell which addresses have accounts.
    const tokenHash = resetTokenHash(input.token.trim(), usable?.email ?? input.email.trim());
    const valid = await this.repo.resetTokenValid(usable?.id ?? 0, tokenHash, this.nowSec());
    if (!usable || !valid) throw invalidToken();
    const password = input.password ?? generatePassword();
    const hash = await hashPassword(password);
    // Checked again inside the transaction, with the user's status: of two concurrent uses of one token only one wins,
    // and a disable landing since the lookup above is not followed by the password it did not see.
    if (!(await this.repo.resetPassword(usable.id, tokenHash, hash, this.nowSec()))) throw invalidToken();
    await this.endCredentials(usable.id);
    return input.password === undefined ? { password, user: usable } : { user: usable };
  }

  private async limit(ip: string): Promise<void> {
    const wait = await this.ipWindow.hit(attemptKeyOfIp(ip), this.cfg.ipPerMinute);
    if (wait) throw new GatewayError(429, 'too_many_attempts', 'Too many password reset attempts from this address', { headers: { 'retry-after': String(wait) } });
  }

  private nowSec() { return Math.floor(this.clock() / 1000); }
}

/**
 * A reset token is stored hashed together with the address it was mailed to, so it only works while the account
 * still has that address: after the owner moves away from a mailbox someone else reads (who learns the new address
 * from the change notice sent to the old one), a link mailed there before cannot reset the account, and the
 * 'password_reset' notice, sent to the current address, is true in saying the link went there.
 */
function resetTokenHash(token: string, address: string): string {
  return sha256Hex(`${address}\n${token}`);
}
