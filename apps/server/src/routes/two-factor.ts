/** TOTP two-factor authentication of the caller, and the admin reset for users below the admin. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { TwoFactorLockout, credentialKey } from '@gw/identity';
import type { UserRow } from '@gw/db';
import { authPlugin, caller } from '../plugins/auth';
import { origin } from '../plugins/origin';
import type { Services } from '../services';
import { envelope, idParams } from './envelope';

const CodeBody = t.Object({
  code: t.String({ minLength: 1, maxLength: 32, description: '6-digit authenticator code (or, where accepted, a backup code XXXXX-XXXXX)' }),
});
/** Enable and new backup codes hand out login secrets, so they need the password as well as a session or token. */
const CodePasswordBody = t.Object({
  code: CodeBody.properties.code,
  current_password: t.String({ minLength: 1, maxLength: 1024, description: 'The caller\'s current password. Checks share one limit with the other current-password checks: 5 per user per 5 minutes' }),
});
const Status = t.Object({ enabled: t.Boolean(), backup_codes_remaining: t.Integer() });
const BackupCodes = t.Object({
  backup_codes: t.Array(t.String(), { description: 'Single-use codes, shown this once' }),
  sessions_ended: t.Integer({ description: 'Other login sessions of the caller that were ended (all of them when the caller uses an access token)' }),
});

/**
 * Runs a 2FA code check; the first lockout of a day (someone signed in is guessing codes) is told to the owner,
 * who can then end the thief's access by changing the password.
 */
async function toldOnLockout<T>(s: Services, ctx: Parameters<typeof origin>[0], user: UserRow, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (e) {
    if (e instanceof TwoFactorLockout && e.firstInDay) s.notices.notify(user, { kind: 'two_factor_guessing', ...origin(ctx) });
    throw e;
  }
}

export const twoFactorRoutes = (s: Services) =>
  new Elysia({ name: 'two-factor-routes', prefix: '/api/user' })
    .use(authPlugin(s))
    .get('/2fa/status', async (ctx) => ok(await s.twoFactor.status(caller(ctx).user.id)), {
      role: 'user', response: envelope(Status), detail: { tags: ['2fa'], summary: '2FA status', description: 'Whether 2FA is on for the caller, and how many backup codes are left.' },
    })
    .post('/2fa/setup', async (ctx) => ok(await s.twoFactor.setup(caller(ctx).user.id)), {
      role: 'user',
      response: envelope(t.Object({ secret: t.String(), otpauth_uri: t.String(), qr: t.String({ description: 'String to render as a QR code (the otpauth URI)' }) })),
      detail: { tags: ['2fa'], summary: 'Start 2FA setup', description: 'Creates a new TOTP secret (URI and QR code). It is not active until confirmed with /api/user/2fa/enable.' },
    })
    .post('/2fa/enable', async (ctx) => {
      const p = caller(ctx);
      const r = await toldOnLockout(s, ctx, p.user, () => s.twoFactor.enable(p, ctx.body.current_password, ctx.body.code));
      s.notices.notify(p.user, { kind: 'two_factor_enabled', ...origin(ctx) });
      return ok(r);
    }, {
      role: 'user', body: CodePasswordBody, response: envelope(BackupCodes),
      detail: {
        tags: ['2fa'], summary: 'Enable 2FA',
        description: 'Confirms the setup with `current_password` and a current code, turns 2FA on and returns 10 single-use backup codes, shown once. '
          + 'Every other login session of the caller ends (access tokens stay). A wrong password is 400 `invalid_current_password`; '
          + 'too many wrong passwords (shared with the password and e-mail changes) 429 `too_many_attempts`; '
          + 'a setup that replaced the pending secret meanwhile 409 `totp_setup_changed` (nothing turned on).',
      },
    })
    .post('/2fa/disable', async (ctx) => {
      const p = caller(ctx);
      const { user } = p;
      await toldOnLockout(s, ctx, user, () => s.twoFactor.disable(user.id, ctx.body.code, credentialKey(p)));
      s.notices.notify(user, { kind: 'two_factor_disabled', ...origin(ctx) });
      return ok(null);
    }, {
      role: 'user', body: CodeBody, response: envelope(t.Null()),
      detail: { tags: ['2fa'], summary: 'Disable 2FA', description: 'Turns the caller\'s 2FA off, given a current TOTP code or an unused backup code. No password is asked (the body is fixed); other sessions stay. Code checks are limited per session or access token (10 per 5 minutes, TOTP_MAX_FAILURES_PER_DAY, TOTP_MAX_FAILURES_PER_30_DAYS; then 429 too_many_attempts, and the owner is e-mailed once a day): a locked one stays locked, and a new login (password and code) has checks of its own.' },
    })
    .post('/2fa/backup_codes', async (ctx) => {
      const p = caller(ctx);
      return ok(await toldOnLockout(s, ctx, p.user, () => s.twoFactor.regenerateBackupCodes(p, ctx.body.current_password, ctx.body.code)));
    }, {
      role: 'user', body: CodePasswordBody, response: envelope(BackupCodes),
      detail: {
        tags: ['2fa'], summary: 'New backup codes',
        description: 'Replaces the backup codes (the old ones stop working); needs `current_password` and a current TOTP code (not a backup code). '
          + 'The new codes are shown once. Every other login session of the caller ends (access tokens stay).',
      },
    })
    .post('/:id/2fa/reset', async (ctx) => {
      const { user } = caller(ctx);
      await s.twoFactor.adminReset(user, ctx.params.id);
      const target = await s.users.byId(ctx.params.id);
      if (target) s.notices.notify(target, { kind: 'two_factor_disabled', actor: user, ...origin(ctx) });
      return ok(null);
    }, {
      role: 'admin', params: idParams, response: envelope(t.Null()),
      detail: { tags: ['2fa'], summary: 'Reset a user\'s 2FA', description: 'Turns off the 2FA of a user whose role is below the caller\'s, for a lost authenticator. Nobody resets their own 2FA this way.' },
    });
