/** Usage logs: every metered request; admins see all, users their own. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { UsageLogView, toUsageLogView } from '@gw/billing';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery } from './envelope';

const filters = {
  ...pageQuery,
  token_id: t.Optional(t.Integer({ minimum: 1, description: 'Relay API key id' })),
  model: t.Optional(t.String({ maxLength: 200 })),
  status: t.Optional(t.Integer({ minimum: 100, maximum: 599 })),
  start_timestamp: t.Optional(t.Integer({ minimum: 0, description: 'Unix seconds, inclusive' })),
  end_timestamp: t.Optional(t.Integer({ minimum: 0, description: 'Unix seconds, inclusive' })),
};

function list(s: Services, q: Record<string, any>, admin: boolean, userId?: number) {
  const p = q.p ?? 1;
  const size = q.page_size ?? 20;
  const r = s.relay.usageLogs.list({
    userId, apiKeyId: q.token_id, channelId: admin ? q.channel_id : undefined, model: q.model, status: q.status,
    from: q.start_timestamp, to: q.end_timestamp, offset: (p - 1) * size, limit: size,
  });
  return ok({ items: r.items.map((row) => toUsageLogView(row, admin)), total: r.total, page: p, page_size: size });
}

export const logRoutes = (s: Services) =>
  new Elysia({ name: 'log-routes', prefix: '/api/log' })
    .use(authPlugin(s))
    .get('/', ({ query }) => list(s, query, true, query.user_id), {
      role: 'admin',
      query: t.Object({ ...filters, user_id: t.Optional(t.Integer({ minimum: 1 })), channel_id: t.Optional(t.Integer({ minimum: 1 })) }),
      response: envelope(page(UsageLogView)),
      detail: { tags: ['logs'], summary: 'All usage logs', description: 'Usage logs of every user (admin), newest first. Filters: user_id, token_id, channel_id, model, status and a time range.' },
    })
    .get('/self', (ctx) => list(s, ctx.query, false, caller(ctx).user.id), {
      role: 'user', query: t.Object(filters), response: envelope(page(UsageLogView)),
      detail: { tags: ['logs'], summary: 'Own usage logs', description: 'The caller\'s usage logs, newest first, without channel details.' },
    });
