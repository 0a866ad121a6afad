import { SESSION_ID_CHARS } from '@gw/db';
import { GatewayError, nowSeconds } from '@gw/core';
import type { CurrentPasswordGuard } from './current-password';
import type { Principal } from './principal';
import type { ManagementAuth } from './sessions';

/**
 * Ending the caller's *other* credentials (a login session, "log out everywhere else", an access token) needs the
 * current password: with a session or token alone, a thief could log the owner out of every browser and break
 * their scripts while keeping its own credential. Ending the credential that calls needs nothing (it is logout).
 * The checks share the one current-password limit, so these routes add no guesses. A session that logged in
 * within RECENT_LOGIN_SECONDS has just proved the password (and the second factor): `gw login --revoke-idle-days`
 * revokes dozens of tokens with it, which one slow password check each would not allow (30 checks a minute).
 */
/** How long after its login a session counts as re-authenticated. */
export const RECENT_LOGIN_SECONDS = 300;

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

  private async reauthenticate(p: Principal, currentPassword: string | undefined): Promise<void> {
    if (!currentPassword) {
      if (p.via === 'session' && p.sessionCreatedAt !== undefined && nowSeconds() - p.sessionCreatedAt < RECENT_LOGIN_SECONDS) return;
      throw passwordNeeded();
    }
    await this.guard.require(p.user.id, currentPassword, p.user.passwordHash);
  }
}
