/** Channel administration (admin): thin handlers over ChannelService. */
import { IdInput } from '@gw/core/id-input';
import { Elysia, t } from 'elysia';
import { Type } from '@sinclair/typebox';
import { ok } from '@gw/core';
import { ChannelCreate, ChannelTestResult, ChannelUpdate, ChannelView } from '@gw/channels';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, idParams, idInput } from './envelope';

const tags = ['channel'];

export const channelRoutes = (s: Services) =>
  new Elysia({ name: 'channel-routes', prefix: '/api/channel' })
    .use(authPlugin(s))
    .get('/', async ({ query }) => {
      const p = query.p ?? 1;
      const size = query.page_size ?? 20;
      const r = await s.channels.list({
        status: query.status, tag: query.tag, type: query.type, model: query.model, group: query.group,
        keyword: query.keyword, offset: (p - 1) * size, limit: size,
      });
      return ok({ ...r, page: p, page_size: size });
    }, {
      role: 'admin',
      query: t.Object({
        ...pageQuery,
        status: t.Optional(t.Integer({ minimum: 1, maximum: 3, description: '1 enabled, 2 manually disabled, 3 auto-disabled', error: 'status must be 1, 2 or 3' })),
        tag: t.Optional(t.String({ maxLength: 64 })),
        type: t.Optional(t.String({ maxLength: 32 })),
        model: t.Optional(t.String({ maxLength: 200, description: 'Channels serving this model' })),
        group: t.Optional(t.String({ maxLength: 64, description: 'Channels open to this group' })),
        keyword: t.Optional(t.String({ maxLength: 128, description: 'Substring of the name' })),
      }),
      response: envelope(page(ChannelView)),
      detail: { tags, summary: 'List channels', description: 'Pages of channels, newest first. Filters: status, tag, type, model, group; `keyword` searches names. Keys are masked.' },
    })
    .post('/', async ({ body }) => ok(await s.channels.create(body)), {
      role: 'admin', body: ChannelCreate, response: envelope(ChannelView),
      detail: { tags, summary: 'Create a channel', description: 'Adds an upstream account. The key is sealed at rest and never returned (reads show it masked). The channel serves `models` to the listed groups at once.' },
    })
    .put('/', async (ctx) => ok(await s.channels.update(caller(ctx).user, ctx.body)), {
      role: 'admin', body: ChannelUpdate, response: envelope(ChannelView),
      detail: { tags, summary: 'Update Channel', description: 'Partial update by `id`: only the fields present change. An omitted or empty `key` keeps the stored key. Only root changes `base_url` (403 `insufficient_role` for an admin: the stored keys would be sent to the new address). Routing picks the change up at once.' },
    })
    .post('/batch', async ({ body }) => ok({ deleted: await s.channels.deleteMany(body.ids) }), {
      role: 'admin',
      body: Type.Object({ ids: Type.Array(IdInput(), { minItems: 1, maxItems: 1000 }) }),
      response: envelope(t.Object({ deleted: t.Integer() })),
      detail: { tags, summary: 'Batch Delete Channels', description: 'Deletes the channels with these ids (1 to 1000 of them); unknown ids are skipped. Answers how many were deleted.' },
    })
    .post('/tag/enabled', async ({ body }) => ok({ updated: await s.channels.setTagStatus(body.tag, 1) }), {
      role: 'admin', body: Type.Object({ tag: Type.String({ minLength: 1, maxLength: 64 }) }),
      response: envelope(t.Object({ updated: t.Integer() })),
      detail: { tags, summary: 'Enable Tag Channel', description: 'Enables every channel with this tag (status 1), including auto-disabled ones. Answers how many changed.' },
    })
    .post('/tag/disabled', async ({ body }) => ok({ updated: await s.channels.setTagStatus(body.tag, 2) }), {
      role: 'admin', body: Type.Object({ tag: Type.String({ minLength: 1, maxLength: 64 }) }),
      response: envelope(t.Object({ updated: t.Integer() })),
      detail: { tags, summary: 'Disable Tag Channel', description: 'Disables every channel with this tag as an operator\'s decision (status 2, never re-enabled by the health probe). Answers how many changed.' },
    })
    .get('/:id', async ({ params }) => ok(await s.channels.get(params.id)), {
      role: 'admin', params: idParams, response: envelope(ChannelView),
      detail: { tags, summary: 'Get a channel', description: 'One channel by id, its key masked.' },
    })
    .delete('/:id', async ({ params }) => {
      await s.channels.delete(params.id);
      return ok(null);
    }, { role: 'admin', params: idParams, response: envelope(t.Null()), detail: { tags, summary: 'Delete a channel', description: 'Removes the channel from routing at once. Usage logs keep its id.' } })
    .post('/:id/test', async (ctx) => ok(await s.channelTester.test(ctx.params.id, ctx.query.model, caller(ctx).user.id)), {
      role: 'admin', params: idParams,
      query: t.Object({ model: t.Optional(t.String({ maxLength: 200, description: 'Model to test (default: the first of the channel)' })) }),
      response: envelope(ChannelTestResult),
      detail: { tags, summary: 'Test a channel', description: 'Sends one minimal real request through the channel\'s adapter, with its first enabled key, and records the response time. The result never changes the channel\'s status. 409 `no_enabled_channel_key` when none of its keys is enabled. The call takes one of the relay\'s upstream slots: 503 `upstream_capacity` when `MAX_UPSTREAM_CONNECTIONS` are in use, 429 `user_upstream_share_exceeded` past the operator\'s `MAX_UPSTREAM_CONNECTIONS_PER_USER`.' },
    });
