import { GatewayError } from '@gw/core';
import type { CredentialsEnded, SecurityStore, UsersStore } from '@gw/db';
import { wrongCurrentPassword, type CurrentPasswordGuard } from './current-password';
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
    if (!user) throw wrongCurrentPassword();
    const now = Math.floor(this.clock() / 1000);
    // Only over the password just checked: of two changes checked against the same password at once (the owner
    // evicting an intruder who also knows it), the later write would otherwise win and end the owner's credentials.
    if (!(await this.users.update(user.id, { passwordHash: await hashPassword(newPassword), updatedAt: now }, user.passwordHash))) {
      throw wrongCurrentPassword();
    }
    return this.repo.endCredentials(user.id, callerCredential(p), now);
  }
}
