import { SESSION_ID_CHARS } from '@gw/db';
import { GatewayError } from '@gw/core';
import type { CurrentPasswordGuard } from './current-password';
import type { Principal } from './principal';
import type { ManagementAuth } from './sessions';

/**
 * Ending the caller's *other* credentials (a login session, "log out everywhere else", access tokens) needs the
 * current password, always: with a session or token alone, a thief could log the owner out of every browser and
 * break their scripts while keeping its own credential. A fresh login is no exception: a cookie stolen from a
 * browser that just logged in is as fresh as the owner's. The password alone is asked, not the second factor, as
 * for the password change, which ends every other session and token too. Ending the credential that calls needs
 * nothing (it is logout). The checks share the one current-password limit, so these routes add no guesses; many
 * tokens are revoked on one check (`revokeAccessTokens`).
 */
// A missing password is told apart from a wrong one, and costs none of the owner's five checks.
const passwordNeeded = () => new GatewayError(400, 'invalid_current_password',
  'Ending another session or access token needs your current password (current_password)', { param: 'current_password' });

export class CredentialEnding {
  constructor(private readonly auth: ManagementAuth, private readonly guard: CurrentPasswordGuard) {}

  async endSession(p: Principal, id: string, currentPassword: string | undefined): Promise<void> {
    const own = p.via === 'session' && p.sessionHash?.slice(0, SESSION_ID_CHARS) === id;
    if (!own) await this.reauthenticate(p, currentPassword);
    await this.auth.endSession(p, id);
  }

  async endOtherSessions(p: Principal, currentPassword: string | undefined): Promise<number> {
    await this.reauthenticate(p, currentPassword);
    return this.auth.endOtherSessions(p);
  }

  async revokeAccessToken(p: Principal, id: number, currentPassword: string | undefined): Promise<void> {
    const own = p.via === 'token' && p.tokenId === id;
    if (!own) await this.reauthenticate(p, currentPassword);
    await this.auth.revokeAccessToken(p.user.id, id);
  }

  async revokeAccessTokens(p: Principal, ids: number[], currentPassword: string | undefined): Promise<number> {
    await this.reauthenticate(p, currentPassword);
    return this.auth.revokeAccessTokens(p.user.id, ids);
  }

  private async reauthenticate(p: Principal, currentPassword: string | undefined): Promise<void> {
    if (!currentPassword) throw passwordNeeded();
    await this.guard.require(p.user.id, currentPassword, p.user.passwordHash);
  }
}
