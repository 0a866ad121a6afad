/** Usage logs: every metered request; admins see all, users their own. Also statistics and a streamed export. */
import { Elysia, t } from 'elysia';
import { ok } from '@gw/core';
import { inlineStatsReader, workerStatsReader, type UsageLogWhere, type UsageStatsStore } from '@gw/db';
import {
  SelfStatsQuery, StatsQueryParams, StatsView, UsageLogView, UsageStatsService, exportUsageLogs, toUsageLogView, type ExportFormat,
} from '@gw/billing';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, queryOf } from './envelope';

/** The row filters shared by the listing and the export. */
const where = {
  token_id: t.Optional(t.Integer({ minimum: 1, description: 'Relay API key id' })),
  model: t.Optional(t.String({ maxLength: 200 })),
  status: t.Optional(t.Integer({ minimum: 100, maximum: 599 })),
  start_timestamp: t.Optional(t.Integer({ minimum: 0, description: 'Unix seconds, inclusive' })),
  end_timestamp: t.Optional(t.Integer({ minimum: 0, description: 'Unix seconds, inclusive' })),
};
const adminWhere = { user_id: t.Optional(t.Integer({ minimum: 1 })), channel_id: t.Optional(t.Integer({ minimum: 1 })) };
const filters = { ...pageQuery, ...where };
const format = { format: t.Optional(t.Union([t.Literal('csv'), t.Literal('jsonl')], { default: 'csv', description: 'csv (header row, RFC 4180) or jsonl' })) };

const toWhere = (q: Record<string, any>, admin: boolean, userId?: number): UsageLogWhere => ({
  userId, apiKeyId: q.token_id, channelId: admin ? q.channel_id : undefined, model: q.model, status: q.status,
  from: q.start_timestamp, to: q.end_timestamp,
});

async function list(s: Services, callerId: number, q: Record<string, any>, admin: boolean, userId?: number) {
  const p = q.p ?? 1;
  const size = q.page_size ?? 20;
  const r = await s.historyReads.run(callerId, () => s.relay.usageLogs.list({ ...toWhere(q, admin, userId), offset: (p - 1) * size, limit: size }));
  return ok({ items: r.items.map((row) => toUsageLogView(row, admin)), total: r.total, page: p, page_size: size });
}

const CONTENT_TYPE: Record<ExportFormat, string> = { csv: 'text/csv; charset=utf-8', jsonl: 'application/x-ndjson; charset=utf-8' };

/**
 * An open export counts as one of its caller's history reads until it ends (read, failed or cancelled); each
 * of its pages is a query in the node's history slots.
 */
async function exportResponse(s: Services, callerId: number, q: Record<string, any>, admin: boolean, userId?: number): Promise<Response> {
  const fmt: ExportFormat = q.format ?? 'csv';
  const stamp = new Date().toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-');
  const gate = s.historyReads;
  const repo: UsageStatsStore = s.stores.usageStats;
  const pages: UsageStatsStore = {
    aggregate: (q) => repo.aggregate(q), latencyHistogram: (q) => repo.latencyHistogram(q),
    exportPage: (f, after, limit) => gate.query(() => repo.exportPage(f, after, limit)),
  };
  gate.enter(callerId);
  const body = await exportUsageLogs(pages, toWhere(q, admin, userId), fmt, admin, undefined, () => gate.leave(callerId));
  return new Response(body, {
    headers: { 'content-type': CONTENT_TYPE[fmt], 'content-disposition': `attachment; filename="usage-logs-${stamp}.${fmt}"`, 'cache-control': 'no-store' },
  });
}

export const logRoutes = (s: Services) => {
  const repo = s.stores.usageStats;
  // Aggregating a year takes seconds: off the request thread, unless the database lives only in this connection.
  // PostgreSQL aggregates on its own server: the query does not occupy this thread either.
  const reader = s.dbh === null || s.config.sqlitePath === ':memory:' ? inlineStatsReader(repo) : workerStatsReader(s.config.sqlitePath);
  s.onClose(() => reader.close());
  const stats = new UsageStatsService(reader);
  // On the worker a year's aggregate occupies neither this thread nor a pool connection: only the caller's share
  // is counted. Inline (PostgreSQL, or a database only this connection holds) it takes a history slot too.
  const onWorker = !(s.dbh === null || s.config.sqlitePath === ':memory:');
  const statsOf = async (callerId: number, q: any, userId?: number) => {
    if (!onWorker) return s.historyReads.run(callerId, () => stats.stats(q, userId));
    s.historyReads.enter(callerId);
    try { return await stats.stats(q, userId); } finally { s.historyReads.leave(callerId); }
  };
  const exportDoc = 'Oldest first, streamed page by page (memory stays flat); same filters as the listing';
  return new Elysia({ name: 'log-routes', prefix: '/api/log' })
    .use(authPlugin(s))
    .get('/', (ctx) => list(s, caller(ctx).user.id, ctx.query, true, ctx.query.user_id), {
      role: 'admin',
      query: t.Object({ ...filters, ...adminWhere }),
      response: envelope(page(UsageLogView)),
      detail: { tags: ['logs'], summary: 'All usage logs', description: 'Usage logs of every user (admin), newest first. Filters: user_id, token_id, channel_id, model, status and a time range.' },
    })
    .get('/self', (ctx) => list(s, caller(ctx).user.id, ctx.query, false, caller(ctx).user.id), {
      role: 'user', query: t.Object(filters), response: envelope(page(UsageLogView)),
      detail: { tags: ['logs'], summary: 'Own usage logs', description: 'The caller\'s usage logs, newest first, without channel details.' },
    })
    .get('/stats', async (ctx) => ok(await statsOf(caller(ctx).user.id, ctx.query)), {
      role: 'admin', query: queryOf(StatsQueryParams), response: envelope(StatsView),
      detail: {
        tags: ['logs'], summary: 'Usage statistics',
        description: 'Per day or hour (tz_offset_minutes shifts the buckets), grouped by model, channel, key, user or none: requests, errors, tokens by kind, cost, and p50/p99 latency from a log-scale histogram (within 4.5% + 1 ms). Daily ranges under 400 days, hourly under 31 days, at most 50,000 rows. Computed on a worker thread.',
      },
    })
    .get('/stats/self', async (ctx) => ok(await statsOf(caller(ctx).user.id, ctx.query, caller(ctx).user.id)), {
      role: 'user', query: queryOf(SelfStatsQuery), response: envelope(StatsView),
      detail: { tags: ['logs'], summary: 'Own usage statistics', description: "The statistics of the caller's own requests (group_by model, key or none); same buckets and limits as GET /api/log/stats." },
    })
    .get('/export', (ctx) => exportResponse(s, caller(ctx).user.id, ctx.query, true, ctx.query.user_id), {
      role: 'admin', query: t.Object({ ...where, ...adminWhere, ...format }),
      detail: { tags: ['logs'], summary: 'Export usage logs', description: `CSV or JSON Lines, with the filters of GET /api/log/ and no paging. ${exportDoc}` },
    })
    .get('/export/self', (ctx) => exportResponse(s, caller(ctx).user.id, ctx.query, false, caller(ctx).user.id), {
      role: 'user', query: t.Object({ ...where, ...format }),
      detail: { tags: ['logs'], summary: 'Export own usage logs', description: `The caller's own usage logs as CSV or JSON Lines, without channel details. ${exportDoc}` },
    });
};
