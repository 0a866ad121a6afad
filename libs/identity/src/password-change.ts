import { GatewayError } from '@gw/core';
import type { CredentialsEnded, SecurityStore, UsersStore } from '@gw/db';
import type { CurrentPasswordGuard } from './current-password';
import { callerCredential, type Principal } from './principal';
import { PASSWORD_MAX, PASSWORD_MIN, hashPassword } from './passwords';

/** A logged-in user changing their own password. */
export class PasswordChangeService {
  constructor(private readonly users: UsersStore, private readonly repo: SecurityStore, private readonly guard: CurrentPasswordGuard,
    private readonly clock: () => number = Date.now) {}

  /**
   * Needs the current password; sets the new one, then ends every session and revokes every access
   * token of the user except the credential making the change (its session or its token), so an
   * intruder holding another credential is out. Returns the counts.
   */
  async change(p: Principal, currentPassword: string, newPassword: string): Promise<CredentialsEnded> {
    // Checked before a check is claimed: a bad new password says nothing about the current one.
    if (newPassword.length < PASSWORD_MIN || newPassword.length > PASSWORD_MAX) {
      throw new GatewayError(400, 'invalid_password', `Password must be ${PASSWORD_MIN} to ${PASSWORD_MAX} characters`, { param: 'new_password' });
    }
    const user = await this.users.byId(p.user.id);
    await this.guard.require(p.user.id, currentPassword, user?.passwordHash);
    if (!user) throw new GatewayError(400, 'invalid_current_password', 'The current password is wrong', { param: 'current_password' });
    const now = Math.floor(this.clock() / 1000);
    await this.users.update(user.id, { passwordHash: await hashPassword(newPassword), updatedAt: now });
    return this.repo.endCredentials(user.id, callerCredential(p), now);
  }
}
