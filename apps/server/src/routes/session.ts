/** Login, logout, the caller's own profile and management access tokens. */
import { IdInput } from '@gw/core/id-input';
import { Elysia, t } from 'elysia';
import { Type } from '@sinclair/typebox';
import { ok } from '@gw/core';
import { MAX_ACCESS_TOKENS_PER_USER, SESSION_COOKIE, TwoFactorLockout, toUserView, UserView, AccessTokenView, LoginSessionView, named } from '@gw/identity';
import { authPlugin, caller } from '../plugins/auth';
import { origin } from '../plugins/origin';
import type { Services } from '../services';
import { envelope, idParams } from './envelope';

/** Ending another credential of the caller: the password, optional so that ending the calling one (and old bodiless calls to it) still work. */
const reauthBody = t.Optional(t.Object({
  current_password: t.Optional(t.String({ maxLength: 1024, description: 'The caller\'s current password; needed unless the credential ended is the calling one. Shares the one current-password limit' })),
}));

export const sessionRoutes = (s: Services) =>
  new Elysia({ name: 'session-routes', prefix: '/api/user' })
    .use(authPlugin(s))
    .post('/login', async ({ body, request, server, set }) => {
      const r = await s.login.login({ username: body.username, password: body.password, totpCode: body.totp_code, ...origin({ request, server }) }).catch(async (e) => {
        // The day's cap on wrong authenticator codes at login was reached (by someone with the password): told once a day.
        if (e instanceof TwoFactorLockout && e.firstInDay) {
          const user = await s.users.byUsername(body.username);
          if (user) s.notices.notify(user, { kind: 'two_factor_login_guessing', ...origin({ request, server }) });
        }
        throw e;
      });
      const cookie = [
        `${SESSION_COOKIE}=${r.sessionId}`, 'Path=/', 'HttpOnly', 'SameSite=Lax', `Max-Age=${s.config.sessionTtlSeconds}`,
        ...(s.config.cookieSecure ? ['Secure'] : []),
      ];
      set.headers['set-cookie'] = cookie.join('; ');
      return ok(toUserView(r.user));
    }, {
      body: t.Object({
        username: t.String({ minLength: 1, maxLength: 64 }),
        password: t.String({ minLength: 1, maxLength: 256 }),
        totp_code: t.Optional(t.String({ maxLength: 32, description: 'TOTP or backup code, required when 2FA is on' })),
      }),
      response: envelope(UserView),
      detail: { tags: ['session'], summary: 'Log in', description: 'Checks username and password (and `totp_code` when 2FA is on) and sets the HttpOnly `gw_session` cookie. Failures count toward a lockout (429 account_locked); wrong authenticator codes also toward a daily cap per account that a password reset does not clear (429 too_many_attempts; a backup code still logs in).' },
    })
    .post('/logout', async (ctx) => {
      await s.auth.logout(caller(ctx));
      ctx.set.headers['set-cookie'] = `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0`;
      return ok(null);
    }, { role: 'user', response: envelope(t.Null()), detail: { tags: ['session'], summary: 'Log out', description: 'Ends the credential that made the call: the current session (and clears the cookie), or, when called with an access token, revokes that token.' } })
    .get('/self', (ctx) => ok(toUserView(caller(ctx).user)), {
      role: 'user', response: envelope(UserView), detail: { tags: ['session'], summary: 'The caller', description: 'The logged-in user.' },
    })
    .get('/session', async (ctx) => ok(await s.auth.listSessions(caller(ctx))), {
      role: 'user', response: envelope(t.Array(LoginSessionView)),
      detail: { tags: ['session'], summary: 'List login sessions', description: 'The caller\'s live login sessions (newest first): when and where each logged in, and which one is making this request. A session you do not know: end it, then change your password.' },
    })
    .delete('/session/:id', async (ctx) => {
      await s.credentialEnding.endSession(caller(ctx), ctx.params.id, ctx.body?.current_password);
      return ok(null);
    }, {
      role: 'user', params: t.Object({ id: t.String({ pattern: '^[0-9a-f]{16}$', description: 'A session id from the list' }) }),
      body: reauthBody, response: envelope(t.Null()),
      detail: { tags: ['session'], summary: 'End a login session', description: 'Ends one of the caller\'s login sessions at once, on every node (404 `session_not_found` for another user\'s or an unknown one). '
        + 'Ending any session but the calling one needs `current_password` (400 `invalid_current_password` when missing or wrong): a stolen session alone cannot log the owner out.' },
    })
    .post('/session/end_others', async (ctx) => ok({ sessions_ended: await s.credentialEnding.endOtherSessions(caller(ctx), ctx.body?.current_password) }), {
      role: 'user', body: reauthBody, response: envelope(t.Object({ sessions_ended: t.Integer() })),
      detail: { tags: ['session'], summary: 'Log out everywhere else', description: 'Ends every login session of the caller but the current one (every one, when called with an access token). '
        + 'Needs `current_password` (400 `invalid_current_password` when missing or wrong). Access tokens stay: revoke them with DELETE /api/user/access_token/{id}; a password change ends both.' },
    })
    .get('/access_token', async (ctx) => ok(await s.auth.listAccessTokens(caller(ctx).user.id)), {
      role: 'user', response: envelope(t.Array(AccessTokenView)), detail: { tags: ['session'], summary: 'List access tokens', description: 'The caller\'s management access tokens (never the tokens themselves).' },
    })
    .post('/access_token', async (ctx) => {
      const { user } = caller(ctx);
      // A token outlives the session (logout, expiry): without the password, a stolen session could make itself permanent.
      await s.auth.requireTokenRoom(user.id);
      await s.currentPassword.require(user.id, ctx.body.current_password, user.passwordHash);
      const r = await s.auth.createAccessToken(user.id, ctx.body.name ?? '', ctx.body.expires_in_days, user.passwordHash);
      s.notices.notify(user, { kind: 'access_token_created', detail: named(r.view.name, r.view.id), subject: `access token ${r.view.id}`, ...origin(ctx) });
      return ok({ ...r.view, token: r.token });
    }, {
      role: 'user',
      body: t.Object({
        name: t.Optional(t.String({ maxLength: 64 })),
        // TypeBox's own integer: Elysia's t.Integer also takes a numeric string in a body ("30"), and bodies take JSON kinds as sent.
        expires_in_days: t.Optional(Type.Integer({ minimum: 1, maximum: 3650 })),
        current_password: t.String({ minLength: 1, maxLength: 1024, description: 'The caller\'s current password. Checks share one limit with the other current-password checks: 5 per user per 5 minutes' }),
      }),
      response: envelope(t.Intersect([AccessTokenView, t.Object({ token: t.String({ description: 'Shown once' }) })])),
      detail: {
        tags: ['session'], summary: 'Create an access token',
        description: 'Creates a management access token (`gwm_…`, sent as Bearer on /api). The token is shown once. Needs `current_password` '
          + '(400 `invalid_current_password` when wrong; the limit is shared with the other current-password checks): a token outlives the session '
          + 'or token that creates it, so neither alone may mint one. Tokens end by revocation, expiry, a password change or reset.',
      },
    })
    .post('/access_token/revoke', async (ctx) => ok({ tokens_revoked: await s.credentialEnding.revokeAccessTokens(caller(ctx), ctx.body.ids, ctx.body.current_password) }), {
      role: 'user',
      body: t.Object({
        ids: t.Array(IdInput(), { minItems: 1, maxItems: MAX_ACCESS_TOKENS_PER_USER, description: 'Ids of access tokens of the caller' }),
        // Optional as on the other ending routes: a missing one is their 400 `invalid_current_password`, costing no check.
        current_password: t.Optional(t.String({ maxLength: 1024, description: 'The caller\'s current password (one check for all the tokens). Shares the one current-password limit' })),
      }),
      response: envelope(t.Object({ tokens_revoked: t.Integer({ description: 'How many live tokens this call revoked' }) })),
      detail: { tags: ['session'], summary: 'Revoke several access tokens', description: 'Revokes several of the caller\'s access tokens on one password check '
        + '(400 `invalid_current_password` when wrong), in one transaction. The caller\'s tokens that already ended (revoked, expired) are done, not an error, '
        + 'and not counted in `tokens_revoked`. An id that was never a token of the caller\'s (another user\'s or unknown, one answer) is 404 `token_not_found` '
        + '(`param: ids`) and nothing is revoked.' },
    })
    .delete('/access_token/:id', async (ctx) => {
      await s.credentialEnding.revokeAccessToken(caller(ctx), ctx.params.id, ctx.body?.current_password);
      return ok(null);
    }, {
      role: 'user', params: idParams, body: reauthBody, response: envelope(t.Null()),
      detail: { tags: ['session'], summary: 'Revoke an access token', description: 'Revokes one of the caller\'s access tokens at once. '
        + 'Any token but the calling one needs `current_password` (400 `invalid_current_password` when missing or wrong): a stolen session or token alone cannot break the owner\'s scripts.' },
    });
