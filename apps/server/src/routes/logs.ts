/** Usage logs: every metered request; admins see all, users their own. Also statistics and a streamed export. */
import { Elysia, t } from 'elysia';
import { GatewayError, ok } from '@gw/core';
import { ROLE, type UsageLogWhere, type UsageStatsStore, type UserRow } from '@gw/db';
import {
  SelfStatsQuery, StatsQueryParams, StatsView, UsageLogView, UsageStatsService, exportUsageLogs, toUsageLogView, type ExportFormat, type KeysHidden, type UsageLogReader,
} from '@gw/billing';
import { keysHiddenFrom } from '@gw/identity';
import { authPlugin, caller } from '../plugins/auth';
import type { Services } from '../services';
import { envelope, page, pageQuery, queryOf, idInput, unixSecondsInput } from './envelope';

/** The row filters shared by the listing and the export. */
const where = {
  token_id: t.Optional(idInput({ description: 'Relay API key id' })),
  model: t.Optional(t.String({ maxLength: 200 })),
  status: t.Optional(t.Integer({ minimum: 100, maximum: 599 })),
  start_timestamp: t.Optional(unixSecondsInput('Unix seconds, inclusive')),
  end_timestamp: t.Optional(unixSecondsInput('Unix seconds, inclusive')),
};
const adminWhere = { user_id: t.Optional(idInput()), channel_id: t.Optional(idInput()) };
/**
 * Keyset paging: `next_cursor` of a page names its last row; passing it back lists the rows after that one.
 * Offset pages shift under new rows (newest first: every insert pushes a row from page 1 onto page 2, which
 * then repeats it), a cursor does not: a walk sees every row that existed when it began, once.
 */
const cursorQuery = {
  cursor: t.Optional(t.String({ pattern: '^[0-9]{1,16}\\.[0-9]{1,16}$', maxLength: 33, description: '`next_cursor` of the previous page: rows after it (p then counts from there)', error: 'cursor must be a next_cursor value' })),
};
const filters = { ...pageQuery, ...where, ...cursorQuery };
const LogPage = t.Intersect([page(UsageLogView), t.Object({
  next_cursor: t.Union([t.String(), t.Null()], { description: 'Pass as `cursor` for the next page; null on the last page' }),
})]);

const cursorOf = (r: { createdAt: number; id: number }) => `${r.createdAt}.${r.id}`;
function parseCursor(c: string | undefined): { createdAt: number; id: number } | undefined {
  if (c === undefined) return undefined;
  const [createdAt, id] = c.split('.').map(Number) as [number, number];
  if (!Number.isSafeInteger(createdAt) || !Number.isSafeInteger(id)) throw new GatewayError(400, 'invalid_value', 'cursor must be a next_cursor value', { param: 'cursor' });
  return { createdAt, id };
}
const format = { format: t.Optional(t.Union([t.Literal('csv'), t.Literal('jsonl')], { default: 'csv', description: 'csv (header row, RFC 4180) or jsonl' })) };

/**
 * A key's rows are all its owner's (a key never changes hands, and AUTOINCREMENT never hands its id to another), so
 * a `token_id` of a key in memory also names its owner: the query walks the `(user_id, created_at)` index instead
 * of scanning every row for the key (200k rows: 57-83 ms on PostgreSQL). A deleted key's owner is looked up by the
 * history reader (withKeyOwner).
 */
const toWhere = (s: Services, q: Record<string, any>, admin: boolean, userId?: number): UsageLogWhere => ({
  userId: userId ?? (q.token_id === undefined ? undefined : s.apiKeys.ownerOf(q.token_id)),
  apiKeyId: q.token_id, channelId: admin ? q.channel_id : undefined, model: q.model, status: q.status,
  from: q.start_timestamp, to: q.end_timestamp,
});

/**
 * How `actor` reads the logs: admins see channel details; an admin below root sees no key id of root's or another
 * admin's rows, and a `token_id` naming such a key matches nothing (`none`), as for an unknown key.
 */
async function readerOf(s: Services, actor: UserRow, q: Record<string, any>, admin: boolean): Promise<{ reader: UsageLogReader; none: boolean }> {
  if (!admin) return { reader: { admin }, none: false };
  const keyHidden = keysHiddenFrom(actor, (id) => s.userDirectory.get(id)?.role);
  return { reader: { admin, keyHidden }, none: q.token_id !== undefined && await filterKeyHidden(s, keyHidden, q.token_id) };
}

/**
 * The keys among `keyIds` whose owner's keys `keyHidden` hides, deleted ones included. The in-memory index forgets a
 * deleted key, so the owners of the keys it does not know are read from deleted_api_keys in one batched query: an
 * account whose CI makes and deletes a key per run leaves thousands, and one read each (in turn, on SQLite on the
 * event loop) made every admin's statistics by key thousands of reads.
 */
const keysHiddenOf = (s: Services, keyHidden: (userId: number) => boolean): KeysHidden => async (keyIds) => {
  const hidden = new Set<number>();
  const forgotten: number[] = [];
  for (const id of keyIds) {
    const owner = s.apiKeys.ownerOf(id);
    if (owner === undefined) forgotten.push(id);
    else if (keyHidden(owner)) hidden.add(id);
  }
  if (forgotten.length) for (const [id, owner] of await s.stores.usageLogs.deletedKeyOwners(forgotten)) if (keyHidden(owner)) hidden.add(id);
  return hidden;
};

/** Whether a `token_id` filter names a key `keyHidden` hides (another admin's key, once deleted, named their rows again). */
const filterKeyHidden = async (s: Services, keyHidden: (userId: number) => boolean, keyId: number): Promise<boolean> =>
  (await keysHiddenOf(s, keyHidden)([keyId])).has(keyId);

async function list(s: Services, actor: UserRow, q: Record<string, any>, admin: boolean, userId?: number) {
  const p = q.p ?? 1;
  const size = q.page_size ?? 20;
  const { reader, none } = await readerOf(s, actor, q, admin);
  const before = parseCursor(q.cursor);
  const r = none ? { items: [], total: 0 }
    : await s.historyReads.run(actor.id, () => s.historyListings.logList({ ...toWhere(s, q, admin, userId), offset: (p - 1) * size, limit: size, before }));
  const last = r.items.length === size ? r.items[size - 1] : undefined;
  return ok({ items: r.items.map((row) => toUsageLogView(row, reader)), total: r.total, page: p, page_size: size, next_cursor: last ? cursorOf(last) : null });
}

const CONTENT_TYPE: Record<ExportFormat, string> = { csv: 'text/csv; charset=utf-8', jsonl: 'application/x-ndjson; charset=utf-8' };

/**
 * An open export counts as one of its caller's history reads until it ends (read, failed or cancelled); each
 * of its pages is a query in the node's history slots.
 */
async function exportResponse(s: Services, actor: UserRow, q: Record<string, any>, admin: boolean, userId?: number): Promise<Response> {
  const callerId = actor.id;
  const fmt: ExportFormat = q.format ?? 'csv';
  const { reader, none } = await readerOf(s, actor, q, admin);
  const stamp = new Date().toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-');
  const gate = s.historyReads;
  const repo: UsageStatsStore = s.stores.usageStats;
  const pages: UsageStatsStore = {
    aggregate: (q) => repo.aggregate(q), latencyHistogram: (q) => repo.latencyHistogram(q),
    exportPage: async (f, after, limit) => (none ? [] : gate.query(() => s.historyListings.exportPage(f, after, limit), callerId, Infinity, { midRead: true })),
  };
  gate.enter(callerId);
  const body = await exportUsageLogs(pages, toWhere(s, q, admin, userId), fmt, reader, undefined, () => gate.leave(callerId));
  return new Response(body, {
    headers: { 'content-type': CONTENT_TYPE[fmt], 'content-disposition': `attachment; filename="usage-logs-${stamp}.${fmt}"`, 'cache-control': 'no-store' },
  });
}

export const logRoutes = (s: Services) => {
  // Aggregating a year takes seconds: off the request thread (Backend.history), unless the database lives only in
  // this connection. PostgreSQL aggregates on its own server: the query does not occupy this thread either.
  const stats = new UsageStatsService(s.historyStats);
  // A statistics query takes a history slot like a listing: on the worker it occupies no pool connection and not
  // this thread, but it does take a core and its worker's turn, so N callers' aggregates run in turn (by caller)
  // and bounded node-wide, not all at once beside the listings.
  const statsOf = async (actor: UserRow, q: any, userId?: number) => {
    // Admins' statistics hide the keys their listings hide (a user's own are all theirs; root sees every key).
    const hidden = userId === undefined && actor.role < ROLE.root ? keysHiddenOf(s, keysHiddenFrom(actor, (id) => s.userDirectory.get(id)?.role)) : undefined;
    return s.historyReads.run(actor.id, () => stats.stats(q, userId, hidden));
  };
  const exportDoc = 'Oldest first, streamed page by page (memory stays flat); same filters as the listing';
  return new Elysia({ name: 'log-routes', prefix: '/api/log' })
    .use(authPlugin(s))
    .get('/', (ctx) => list(s, caller(ctx).user, ctx.query, true, ctx.query.user_id), {
      role: 'admin',
      query: t.Object({ ...filters, ...adminWhere }),
      response: envelope(LogPage),
      detail: { tags: ['logs'], summary: 'All usage logs', description: 'Usage logs of every user (admin), newest first. Filters: user_id, token_id, channel_id, model, status and a time range. An admin below root gets api_key_id null on rows of root and other admins, and a token_id of theirs matches nothing. Page with `cursor` (the previous page\'s `next_cursor`) to walk them without repeats or gaps while new rows arrive.' },
    })
    .get('/self', (ctx) => list(s, caller(ctx).user, ctx.query, false, caller(ctx).user.id), {
      role: 'user', query: t.Object(filters), response: envelope(LogPage),
      detail: { tags: ['logs'], summary: 'Own usage logs', description: 'The caller\'s usage logs, newest first, without channel details; `cursor` pages as in the admin listing.' },
    })
    .get('/stats', async (ctx) => ok(await statsOf(caller(ctx).user, ctx.query)), {
      role: 'admin', query: queryOf(StatsQueryParams), response: envelope(StatsView),
      detail: {
        tags: ['logs'], summary: 'Usage statistics',
        description: 'Per day or hour (tz_offset_minutes shifts the buckets), grouped by model, channel, key, user or none: requests, errors, tokens by kind, cost, and p50/p99 latency from a log-scale histogram (within 4.5% + 1 ms). Daily ranges under 400 days, hourly under 31 days, at most 50,000 rows. Computed off the request thread, in turn with the other history reads, for at most HISTORY_QUERY_TIMEOUT_MS (503 history_timeout). An admin below root gets the keys of root and other admins summed in the null group, and a token_id of theirs matches nothing.',
      },
    })
    .get('/stats/self', async (ctx) => ok(await statsOf(caller(ctx).user, ctx.query, caller(ctx).user.id)), {
      role: 'user', query: queryOf(SelfStatsQuery), response: envelope(StatsView),
      detail: { tags: ['logs'], summary: 'Own usage statistics', description: "The statistics of the caller's own requests (group_by model, key or none); same buckets and limits as GET /api/log/stats." },
    })
    .get('/export', (ctx) => exportResponse(s, caller(ctx).user, ctx.query, true, ctx.query.user_id), {
      role: 'admin', query: t.Object({ ...where, ...adminWhere, ...format }),
      detail: { tags: ['logs'], summary: 'Export usage logs', description: `CSV or JSON Lines, with the filters of GET /api/log/ and no paging. ${exportDoc}` },
    })
    .get('/export/self', (ctx) => exportResponse(s, caller(ctx).user, ctx.query, false, caller(ctx).user.id), {
      role: 'user', query: t.Object({ ...where, ...format }),
      detail: { tags: ['logs'], summary: 'Export own usage logs', description: `The caller's own usage logs as CSV or JSON Lines, without channel details. ${exportDoc}` },
    });
};
