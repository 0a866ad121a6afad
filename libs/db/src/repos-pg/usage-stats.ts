import { and, asc, count, sql, sum, type SQL } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { usageLogs } from '../schema-pg';
import type { UsageLogRow, UsageLogWhere } from '../repos/usage-logs';
import { pgExactSum } from '../repos/exact-sum';
import { LATENCY_BINS_PER_OCTAVE, SUMMED, type ExportCursor, type LatencyBinRow, type StatsQuery, type StatsRow } from '../repos/usage-stats';
import { pgLogConditions } from './usage-logs';
import { collateC } from './sql';
import { statsBucket, statsWhere } from '../repos/usage-stats-sql';

/**
 * The PostgreSQL latency bin. PostgreSQL has no log2(); numeric `log(2, x)` is exact at powers of two
 * (log(2, 8) = 3.000…), so flooring it gives the bin SQLite's `cast(log2(x) * 8 as integer)` does.
 */
export function pgLatencyBinSql(col: SQL | typeof usageLogs.latencyMs): SQL<number> {
  return sql<number>`case when ${col} < 1 then 0 else floor(log(2, ${col}::numeric) * ${sql.raw(String(LATENCY_BINS_PER_OCTAVE))})::int + 1 end`;
}

const GROUP_COLUMN = {
  model: usageLogs.model, channel: usageLogs.channelId, key: usageLogs.apiKeyId, user: usageLogs.userId,
} as const;

/** PostgreSQL twin of ../repos/usage-stats.ts (same methods, async; `*Query` return PG builders). */
export class PgUsageStatsRepo {
  constructor(private readonly db: PgDb) {}

  private where(q: StatsQuery): SQL {
    return statsWhere(usageLogs, q);
  }

  private bucket(q: StatsQuery): SQL<number> {
    return statsBucket(usageLogs, q);
  }

  /** Ids are bigint, which a raw expression returns as a string: map them back to numbers (null stays null). */
  private group(q: StatsQuery): SQL<string | number | null> {
    if (q.groupBy === 'none') return sql<null>`null`;
    if (q.groupBy === 'model') return sql<string>`${GROUP_COLUMN.model}`;
    return sql<number>`${GROUP_COLUMN[q.groupBy]}`.mapWith(Number);
  }

  async aggregate(q: StatsQuery): Promise<StatsRow[]> {
    return (await this.aggregateQuery(q)).map((r) => ({
      bucket: r.bucket, grp: r.grp, requests: r.requests, errors: r.errors,
      inputTokens: BigInt(r.inputTokens), outputTokens: BigInt(r.outputTokens), cacheReadTokens: BigInt(r.cacheReadTokens),
      cacheWriteTokens: BigInt(r.cacheWriteTokens), audioTokens: BigInt(r.audioInputTokens) + BigInt(r.audioOutputTokens), cost: BigInt(r.cost),
    }));
  }

  /** Token and cost sums as exact numeric text (exact-sum.ts); the two audio columns apart, as their bigint sum could overflow. */
  aggregateQuery(q: StatsQuery) {
    const sums = Object.fromEntries(SUMMED.map((c) => [c, pgExactSum(usageLogs[c])])) as Record<(typeof SUMMED)[number], SQL<string>>;
    return this.db.select({
      bucket: this.bucket(q).mapWith(Number).as('bucket'),
      grp: this.group(q).as('grp'),
      requests: count(),
      errors: sum(sql`case when ${usageLogs.status} >= 400 or ${usageLogs.errorCode} <> '' then 1 else 0 end`).mapWith(Number),
      ...sums,
    }).from(usageLogs).where(this.where(q))
      // As SQLite orders: text bytewise (a position cannot take a collation, so the model column is
      // named) and NULL first (PostgreSQL puts it last by default).
      .groupBy(sql`1`, sql`2`).orderBy(sql`1`, q.groupBy === 'model' ? collateC(usageLogs.model) : sql`2 nulls first`).limit(q.maxRows + 1);
  }

  async latencyHistogram(q: StatsQuery): Promise<LatencyBinRow[]> {
    return this.latencyHistogramQuery(q);
  }

  latencyHistogramQuery(q: StatsQuery) {
    return this.db.select({
      bucket: this.bucket(q).mapWith(Number).as('bucket'),
      grp: this.group(q).as('grp'),
      bin: pgLatencyBinSql(usageLogs.latencyMs).mapWith(Number).as('bin'),
      n: count(),
    }).from(usageLogs).where(this.where(q)).groupBy(sql`1`, sql`2`, sql`3`);
  }

  async exportPage(f: UsageLogWhere, after: ExportCursor | null, limit: number): Promise<UsageLogRow[]> {
    return this.exportPageQuery(f, after, limit);
  }

  exportPageQuery(f: UsageLogWhere, after: ExportCursor | null, limit: number) {
    const conds = pgLogConditions(f);
    if (after) conds.push(sql`(${usageLogs.createdAt}, ${usageLogs.id}) > (${after.createdAt}, ${after.id})`);
    return this.db.select().from(usageLogs).where(and(...conds))
      .orderBy(asc(usageLogs.createdAt), asc(usageLogs.id)).limit(limit);
  }
}
