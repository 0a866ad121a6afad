/** User administration (admin) and the caller's own profile: thin handlers over UserService. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { UserCreate, UserSelfUpdate, UserUpdate, UserView } from '@gw/identity';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery } from './envelope';

const idParams = t.Object({ id: t.Integer({ minimum: 1 }) });
const tags = ['user'];

export const userRoutes = (s: Services) =>
  new Elysia({ name: 'user-routes', prefix: '/api/user' })
    .use(authPlugin(s))
    .put('/self', async (ctx) => ok(await s.userAdmin.updateSelf(caller(ctx).user, ctx.body)), {
      role: 'user', body: UserSelfUpdate, response: envelope(UserView),
      detail: { tags, summary: "Update the caller's own display name and e-mail" },
    })
    .get('/', ({ query }) => {
      const p = query.p ?? 1;
      const size = query.page_size ?? 20;
      const r = s.userAdmin.list({ keyword: query.keyword, role: query.role, status: query.status, group: query.group, offset: (p - 1) * size, limit: size });
      return ok({ ...r, page: p, page_size: size });
    }, {
      role: 'admin',
      query: t.Object({
        ...pageQuery,
        keyword: t.Optional(t.String({ maxLength: 128, description: 'Substring of username, display name or e-mail' })),
        role: t.Optional(t.Integer({ description: '1, 10 or 100' })),
        status: t.Optional(t.Integer({ minimum: 1, maximum: 2, error: 'status must be 1 or 2' })),
        group: t.Optional(t.String({ maxLength: 64 })),
      }),
      response: envelope(page(UserView)),
      detail: { tags, summary: 'List users (paged; filter by keyword, role, status, group)' },
    })
    .post('/', async (ctx) => ok(await s.userAdmin.create(caller(ctx).user, ctx.body)), {
      role: 'admin', body: UserCreate, response: envelope(UserView),
      detail: { tags, summary: 'Create User (SPEC); 409 username_taken / email_taken; initial quota is credited through the ledger' },
    })
    .put('/', async (ctx) => ok(await s.userAdmin.update(caller(ctx).user, ctx.body)), {
      role: 'admin', body: UserUpdate, response: envelope(UserView),
      detail: { tags, summary: 'Update a user (partial; quota is changed only through POST /api/ledger/adjust)' },
    })
    .get('/:id', ({ params }) => ok(s.userAdmin.get(params.id)), {
      role: 'admin', params: idParams, response: envelope(UserView), detail: { tags, summary: 'Get a user' },
    })
    .delete('/:id', (ctx) => {
      s.userAdmin.delete(caller(ctx).user, ctx.params.id);
      return ok(null);
    }, { role: 'admin', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Delete a user (never a root user)' } })
    .post('/:id/enable', (ctx) => ok(s.userAdmin.setStatus(caller(ctx).user, ctx.params.id, 1)), {
      role: 'admin', params: idParams, response: envelope(UserView), detail: { tags, summary: 'Enable a user' },
    })
    .post('/:id/disable', (ctx) => ok(s.userAdmin.setStatus(caller(ctx).user, ctx.params.id, 2)), {
      role: 'admin', params: idParams, response: envelope(UserView),
      detail: { tags, summary: 'Disable a user: their sessions end and their API keys stop working at once' },
    });
