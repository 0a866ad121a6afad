import { GatewayError, localWindows, type AttemptWindow, type AttemptWindows } from '@gw/core';
import type { CredentialsEnded, SecurityStore, UsersStore } from '@gw/db';
import type { Principal } from './principal';
import { PASSWORD_MAX, PASSWORD_MIN, hashPassword, verifyPassword } from './passwords';

/** Wrong current passwords allowed per user in the window before 429 (a stolen session must not guess freely). */
const MAX_FAILURES = 5;
const FAILURE_WINDOW_MS = 5 * 60_000;

/** A logged-in user changing their own password. */
export class PasswordChangeService {
  private readonly failures: AttemptWindow;

  constructor(private readonly users: UsersStore, private readonly repo: SecurityStore, private readonly clock: () => number = Date.now,
    windows: AttemptWindows = localWindows) {
    this.failures = windows('password-change', FAILURE_WINDOW_MS, clock);
  }

  /**
   * Needs the current password; sets the new one, then ends every session and revokes every access
   * token of the user except the credential making the change (its session or its token), so an
   * intruder holding another credential is out. Returns the counts.
   */
  async change(p: Principal, currentPassword: string, newPassword: string): Promise<CredentialsEnded> {
    const key = `u${p.user.id}`;
    if ((await this.failures.count(key)) >= MAX_FAILURES) {
      throw new GatewayError(429, 'too_many_attempts', 'Too many wrong passwords; try again later', { headers: { 'retry-after': String(FAILURE_WINDOW_MS / 1000) } });
    }
    if (newPassword.length < PASSWORD_MIN || newPassword.length > PASSWORD_MAX) {
      throw new GatewayError(400, 'invalid_password', `Password must be ${PASSWORD_MIN} to ${PASSWORD_MAX} characters`, { param: 'new_password' });
    }
    const user = await this.users.byId(p.user.id);
    if (!user || !(await verifyPassword(currentPassword, user.passwordHash))) {
      await this.failures.hit(key, Number.MAX_SAFE_INTEGER);
      throw new GatewayError(400, 'invalid_current_password', 'The current password is wrong', { param: 'current_password' });
    }
    const now = Math.floor(this.clock() / 1000);
    await this.users.update(user.id, { passwordHash: await hashPassword(newPassword), updatedAt: now });
    await this.failures.reset(key);
    const keep = p.via === 'session' ? { sessionHash: p.sessionHash } : { tokenId: p.tokenId };
    return this.repo.endCredentials(user.id, keep, now);
  }
}
