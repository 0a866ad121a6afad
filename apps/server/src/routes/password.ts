/** Password reset by e-mail (no auth) and changing one's own password. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { authPlugin, caller } from '../plugins/auth';
import { clientIp } from '../plugins/client-ip';
import { origin } from '../plugins/origin';
import type { Services } from '../services';
import { envelope } from './envelope';

export const passwordRoutes = (s: Services) =>
  new Elysia({ name: 'password-routes', prefix: '/api/user' })
    .use(authPlugin(s))
    .post('/reset/request', async ({ body, request, server }) => {
      await s.passwordReset.request(body.email, clientIp(request, server));
      return ok(null);
    }, {
      body: t.Object({ email: t.String({ minLength: 1, maxLength: 254 }) }),
      response: envelope(t.Null()),
      detail: { tags: ['password'], summary: 'Request a password reset', description: 'E-mails a single-use, expiring reset token. The answer is the same, in similar time, whether or not the address is registered. Limited per IP.' },
    })
    .post('/reset', async (ctx) => {
      const r = await s.passwordReset.reset(ctx.body, clientIp(ctx.request, ctx.server));
      // Only once the reset has gone through (a bad or expired token throws above). Whoever could read that
      // mailbox could reset the password; the owner, who may not be reading it now, should see this.
      s.notices.notify(r.user, { kind: 'password_reset', ...origin(ctx) });
      return ok(r.password === undefined ? null : { password: r.password });
    }, {
      body: t.Object({
        email: t.String({ minLength: 1, maxLength: 254 }),
        token: t.String({ minLength: 1, maxLength: 256 }),
        password: t.Optional(t.String({ maxLength: 1024 })),
      }),
      response: envelope(t.Union([t.Null(), t.Object({ password: t.String({ description: 'The generated password, shown once' }) })])),
      detail: { tags: ['password'], summary: 'Reset Password', description: 'Consumes the e-mailed token and sets the password; without `password` a generated one is returned once. Ends every session and revokes every access token of the user, and e-mails the account a security notice.' },
    })
    .post('/password', async (ctx) => {
      const p = caller(ctx);
      const r = await s.passwordChange.change(p, ctx.body.current_password, ctx.body.new_password);
      s.notices.notify(p.user, { kind: 'password_changed', ...origin(ctx) });
      return ok(r);
    }, {
      role: 'user',
      body: t.Object({ current_password: t.String({ maxLength: 1024 }), new_password: t.String({ maxLength: 1024 }) }),
      response: envelope(t.Object({
        sessions_ended: t.Integer({ description: 'Login sessions ended (all but the caller’s own, when the caller uses one)' }),
        tokens_revoked: t.Integer({ description: 'Access tokens revoked (all but the one making the call, when the caller uses one)' }),
      })),
      detail: { tags: ['password'], summary: 'Change password', description: 'Changes the caller\'s password (the current one is required). Ends every other session and revokes every other access token.' },
    });
