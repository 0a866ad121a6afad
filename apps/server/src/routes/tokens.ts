/** Relay API keys (`sk-…`): users manage their own, admins anyone's they may manage (`user_id`). */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { ApiKeyCreate, ApiKeyUpdate, ApiKeyView, named } from '@gw/identity';
import { authPlugin, caller } from '../plugins/auth';
import { origin } from '../plugins/origin';
import type { Services } from '../services';
import { envelope, page, pageQuery, idParams, idInput } from './envelope';

const tags = ['token'];

export const tokenRoutes = (s: Services) =>
  new Elysia({ name: 'token-routes', prefix: '/api/token' })
    .use(authPlugin(s))
    .get('/', async (ctx) => {
      const p = ctx.query.p ?? 1;
      const size = ctx.query.page_size ?? 20;
      const r = await s.apiKeys.list(caller(ctx).user, { userId: ctx.query.user_id, keyword: ctx.query.keyword, status: ctx.query.status, offset: (p - 1) * size, limit: size });
      return ok({ ...r, page: p, page_size: size });
    }, {
      role: 'user',
      query: t.Object({
        ...pageQuery,
        user_id: t.Optional(idInput({ description: "Admins: another user's keys" })),
        keyword: t.Optional(t.String({ maxLength: 64, description: 'Substring of the name' })),
        status: t.Optional(t.Integer({ minimum: 1, maximum: 2, error: 'status must be 1 or 2' })),
      }),
      response: envelope(page(ApiKeyView)),
      detail: { tags, summary: 'List API keys', description: 'The caller\'s relay API keys; admins pass `user_id` to see another user\'s.' },
    })
    .post('/', async (ctx) => {
      const { user } = caller(ctx);
      const r = await s.apiKeys.create(user, ctx.body);
      s.notices.notify(r.owner, {
        kind: 'relay_key_created', detail: named(r.view.name, r.view.id), subject: `relay key ${r.view.id}`, actor: user, ...origin(ctx),
      });
      return ok({ ...r.view, key: r.key });
    }, {
      role: 'user', body: ApiKeyCreate,
      response: envelope(t.Intersect([ApiKeyView, t.Object({ key: t.String({ description: 'The full sk-… key, shown only in this response' }) })])),
      detail: { tags, summary: 'Create an API key', description: 'Creates a relay API key (`sk-…`) with optional model and IP allow-lists, expiry and budget. `data.key` is the full key, shown once.' },
    })
    .put('/', async (ctx) => {
      const { user } = caller(ctx);
      const { view, owner, revived, widened } = await s.apiKeys.change(user, ctx.body);
      // One line per change: a key brought back says what it came back with, if wider than it left.
      if (revived || widened.length) {
        s.notices.notify(owner, {
          kind: revived ? 'relay_key_enabled' : 'relay_key_widened',
          detail: [named(view.name, view.id), ...widened].join('; '), subject: `relay key ${view.id}`, actor: user, ...origin(ctx),
        });
      }
      return ok(view);
    }, {
      role: 'user', body: ApiKeyUpdate, response: envelope(ApiKeyView),
      detail: { tags, summary: 'Update an API key', description: 'Partial update by id (status 1 enabled, 2 disabled). A disabled key stops working at once, streams in flight included. Making a key usable again or giving it more reach (IP allow-list, models, quota, expiry, group, limits) e-mails its owner a security notice.' },
    })
    .get('/:id', async (ctx) => ok(await s.apiKeys.get(caller(ctx).user, ctx.params.id)), {
      role: 'user', params: idParams, response: envelope(ApiKeyView), detail: { tags, summary: 'Get an API key', description: 'One API key\'s settings and usage, never the key itself.' },
    })
    .delete('/:id', async (ctx) => {
      await s.apiKeys.delete(caller(ctx).user, ctx.params.id);
      return ok(null);
    }, { role: 'user', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Delete an API key', description: 'Deletes the key; requests in flight with it end.' } });
