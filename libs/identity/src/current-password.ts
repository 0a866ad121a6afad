import { GatewayError, localWindows, type AttemptWindow, type AttemptWindows } from '@gw/core';
import { passwordGate } from './password-gate';
import { verifyPasswordHeld } from './passwords';

/** Current-password checks allowed per user in the window before 429 (a stolen session must not guess freely). */
export const CURRENT_PASSWORD_CHECKS = 5;
const WINDOW_MS = 5 * 60_000;

/** 400 `invalid_current_password`: the password given is not (or, by the time of the write, no longer) the user's. */
export const wrongCurrentPassword = () => new GatewayError(400, 'invalid_current_password', 'The current password is wrong', { param: 'current_password' });

/**
 * The one limit on checking a logged-in user's current password, shared by every route that asks for it
 * (changing the password, changing the e-mail that receives resets, turning 2FA on, new backup codes,
 * new access tokens, ending another session or token), so alternating them does not add
 * guesses. Each check is claimed before the slow verify: a burst of parallel guesses gets at most the limit
 * evaluated (counting failures afterwards let 40 parallel guesses through). A right password clears the count.
 */
export class CurrentPasswordGuard {
  private readonly window: AttemptWindow;
  private readonly checks: AttemptWindow;

  constructor(
    clock: () => number = Date.now,
    windows: AttemptWindows = localWindows,
    /**
     * Checks per user per minute, right passwords included (they clear the failure count above, so without
     * this a user who knows their password could keep the node's password gate busy, e.g. minting tokens).
     */
    private readonly checksPerMinute = 30,
  ) {
    this.window = windows('password-change', WINDOW_MS, clock);
    this.checks = windows('password-checks', 60_000, clock);
  }

  /** True when `password` is the user's; throws 429 `too_many_attempts` once the window's checks are used up. */
  async verify(userId: number, password: string, hash: string | null | undefined): Promise<boolean> {
    const key = `u${userId}`;
    const busy = await this.checks.hit(key, this.checksPerMinute);
    if (busy) throw new GatewayError(429, 'too_many_password_checks', 'Too many password checks for this account; try again later', { headers: { 'retry-after': String(busy) } });
    // The slot is taken before a wrong-password attempt is counted: a busy refusal (503) costs no attempt.
    const release = await passwordGate().acquire();
    try {
      const wait = await this.window.hit(key, CURRENT_PASSWORD_CHECKS);
      if (wait) throw new GatewayError(429, 'too_many_attempts', 'Too many wrong passwords; try again later', { headers: { 'retry-after': String(wait) } });
      const ok = !!hash && (await verifyPasswordHeld(password, hash));
      if (ok) await this.window.reset(key);
      return ok;
    } finally {
      release();
    }
  }

  /**
   * `verify`, for the routes that answer a wrong password with 400 `invalid_current_password`
   * (`param: current_password`): the password change, 2FA enable, new backup codes, new access tokens.
   */
  async require(userId: number, password: string | undefined, hash: string | null | undefined): Promise<void> {
    if (!(await this.verify(userId, password ?? '', hash))) {
      throw wrongCurrentPassword();
    }
  }
}
