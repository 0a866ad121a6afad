/** User administration (admin) and the caller's own profile: thin handlers over UserService. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { UserCreate, UserSelfUpdate, UserUpdate, UserView } from '@gw/identity';
import { authPlugin, caller } from '../plugins/auth';
import { origin } from '../plugins/origin';
import type { Services } from '../services';
import { envelope, page, pageQuery, idParams, idInput } from './envelope';

const tags = ['user'];

export const userRoutes = (s: Services) =>
  new Elysia({ name: 'user-routes', prefix: '/api/user' })
    .use(authPlugin(s))
    .put('/self', async (ctx) => {
      const { user } = caller(ctx);
      const view = await s.userAdmin.updateSelf(user, ctx.body);
      // The old address is told: it is the one an intruder who knows the password would want to silence.
      if (user.email && view.email !== user.email) s.notices.notify(user, { kind: 'email_changed', detail: `now ${view.email ?? '(none)'}`, to: user.email, ...origin(ctx) });
      return ok(view);
    }, {
      role: 'user', body: UserSelfUpdate, response: envelope(UserView),
      detail: { tags, summary: 'Update own profile', description: 'Changes the caller\'s display name and e-mail, and a root user\'s username (403 username_not_editable below root). A new e-mail or username needs `current_password`: that address receives password resets, that name is what you log in with.' },
    })
    .get('/', async ({ query }) => {
      const p = query.p ?? 1;
      const size = query.page_size ?? 20;
      const r = await s.userAdmin.list({ keyword: query.keyword, role: query.role, status: query.status, group: query.group, offset: (p - 1) * size, limit: size });
      return ok({ ...r, page: p, page_size: size });
    }, {
      role: 'admin',
      query: t.Object({
        ...pageQuery,
        keyword: t.Optional(t.String({ maxLength: 128, description: 'Substring of username, display name or e-mail' })),
        role: t.Optional(t.Integer({ minimum: 1, maximum: 100, description: '1, 10 or 100' })),
        status: t.Optional(t.Integer({ minimum: 1, maximum: 2, error: 'status must be 1 or 2' })),
        group: t.Optional(t.String({ maxLength: 64 })),
      }),
      response: envelope(page(UserView)),
      detail: { tags, summary: 'List users', description: 'Pages of users (admin); filter by keyword, role, status and group.' },
    })
    .post('/', async (ctx) => ok(await s.userAdmin.create(caller(ctx).user, ctx.body)), {
      role: 'admin', body: UserCreate, response: envelope(UserView),
      detail: { tags, summary: 'Create User', description: 'Creates a user (admin: of a lower role than the caller). A taken username or e-mail is a 409 (username_taken, email_taken). An initial `quota` is credited as a ledger `adjust` entry.' },
    })
    .put('/', async (ctx) => {
      const { user } = caller(ctx);
      const { before, view } = await s.userAdmin.change(user, ctx.body);
      // Both go to the address the owner had: an admin who sets a new one (and a password) must not be told alone.
      const owner = { id: view.id, username: view.username, email: before.email ?? view.email };
      if (before.email && view.email !== before.email) s.notices.notify(owner, { kind: 'email_changed', detail: `now ${view.email ?? '(none)'}`, actor: user, ...origin(ctx) });
      if (ctx.body.password !== undefined) s.notices.notify(owner, { kind: 'password_changed', actor: user, ...origin(ctx) });
      return ok(view);
    }, {
      role: 'admin', body: UserUpdate, response: envelope(UserView),
      detail: { tags, summary: 'Update a user', description: 'Partial update by id. The balance is not changed here but through POST /api/ledger/adjust; one\'s own password, e-mail and username neither (403 use_self_route), but through POST /api/user/password and PUT /api/user/self, which ask for the current password.' },
    })
    .get('/:id', async ({ params }) => ok(await s.userAdmin.get(params.id)), {
      role: 'admin', params: idParams, response: envelope(UserView), detail: { tags, summary: 'Get a user', description: 'One user by id.' },
    })
    .delete('/:id', async (ctx) => {
      await s.userAdmin.delete(caller(ctx).user, ctx.params.id);
      return ok(null);
    }, { role: 'admin', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Delete a user', description: 'Deletes a user of a lower role (never a root user); their keys stop working at once.' } })
    .post('/:id/enable', async (ctx) => ok(await s.userAdmin.setStatus(caller(ctx).user, ctx.params.id, 1)), {
      role: 'admin', params: idParams, response: envelope(UserView), detail: { tags, summary: 'Enable a user', description: 'Enables a disabled user.' },
    })
    .post('/:id/disable', async (ctx) => ok(await s.userAdmin.setStatus(caller(ctx).user, ctx.params.id, 2)), {
      role: 'admin', params: idParams, response: envelope(UserView),
      detail: { tags, summary: 'Disable a user', description: 'Disables a user: their sessions end and their API keys stop working at once, streams in flight included. A password-reset link mailed before stops working for good.' },
    });
