import { and, eq, gte, lte, sql, type Column, type SQL } from 'drizzle-orm';
import type { UsageLogFilter, UsageLogWhere } from './usage-logs';
import type { StatsQuery } from './usage-stats';

/** The usage_logs columns the log and statistics filters use, in either dialect's table. */
export interface StatsColumns {
  createdAt: Column;
  userId: Column;
  apiKeyId: Column;
  channelId: Column;
  model: Column;
  status: Column;
}

/** The listing's keyset bound, rows older than `before` newest first: one index range (row values: SQLite 3.15+, PostgreSQL). */
export function beforeCondition(t: { createdAt: Column; id: Column }, before: UsageLogFilter['before']): SQL[] {
  return before ? [sql`(${t.createdAt}, ${t.id}) < (${before.createdAt}, ${before.id})`] : [];
}

/** The created_at range and optional filters of a statistics query (both dialects write it alike). */
export function statsWhere(t: StatsColumns, q: StatsQuery): SQL {
  const conds: SQL[] = [gte(t.createdAt, q.from), lte(t.createdAt, q.to)];
  if (q.userId !== undefined) conds.push(eq(t.userId, q.userId));
  if (q.apiKeyId !== undefined) conds.push(eq(t.apiKeyId, q.apiKeyId));
  if (q.channelId !== undefined) conds.push(eq(t.channelId, q.channelId));
  if (q.model) conds.push(eq(t.model, q.model));
  return and(...conds)!;
}

/**
 * The bucket start of each row: integer arithmetic, so `/` truncates toward zero in both SQLite and
 * PostgreSQL (bigint); sizes are whole seconds checked by the caller, inlined as literals.
 */
export function statsBucket(t: StatsColumns, q: StatsQuery): SQL<number> {
  const size = sql.raw(String(Math.trunc(q.bucketSeconds)));
  const off = sql.raw(String(Math.trunc(q.offsetSeconds)));
  return sql<number>`((${t.createdAt} + ${off}) / ${size}) * ${size} - ${off}`;
}

/** The WHERE terms of a log filter (empty = every row), in either dialect's table. */
export function logConditionsOf(t: StatsColumns, f: UsageLogWhere): SQL[] {
  const conds: SQL[] = [];
  if (f.userId !== undefined) conds.push(eq(t.userId, f.userId));
  if (f.apiKeyId !== undefined) conds.push(eq(t.apiKeyId, f.apiKeyId));
  if (f.channelId !== undefined) conds.push(eq(t.channelId, f.channelId));
  if (f.model) conds.push(eq(t.model, f.model));
  if (f.status !== undefined) conds.push(eq(t.status, f.status));
  if (f.from !== undefined) conds.push(gte(t.createdAt, f.from));
  if (f.to !== undefined) conds.push(lte(t.createdAt, f.to));
  return conds;
}
