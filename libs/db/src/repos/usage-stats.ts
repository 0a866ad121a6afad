import { and, asc, count, sql, sum, type SQL } from 'drizzle-orm';
import { joinSum, sqliteSumParts } from './exact-sum';
import type { Db } from '../client';
import { usageLogs } from '../schema';
import { logConditions, type UsageLogRow, type UsageLogWhere } from './usage-logs';
import { statsBucket, statsWhere } from './usage-stats-sql';

/** Where an export page ends: the next page starts after this row. */
export interface ExportCursor { createdAt: number; id: number }

/** What usage statistics can be grouped by (one dimension at a time). */
export type StatsGroupBy = 'model' | 'channel' | 'key' | 'user' | 'none';

export interface StatsQuery {
  /** Unix seconds, inclusive. */
  from: number;
  to: number;
  /** Bucket width in seconds (3600 or 86400). */
  bucketSeconds: number;
  /** Seconds added to UTC before bucketing, so days start at local midnight. */
  offsetSeconds: number;
  groupBy: StatsGroupBy;
  userId?: number;
  apiKeyId?: number;
  channelId?: number;
  model?: string;
  /** Stop after this many (bucket, group) rows; the caller refuses the query when it is reached. */
  maxRows: number;
}

/**
 * One (bucket, group) aggregate; `grp` is null for `none` (and for requests no channel served). Token and
 * cost sums are exact BigInts: they can pass 2^53 (see exact-sum.ts); the service decides how to show them.
 */
export interface StatsRow {
  bucket: number;
  grp: string | number | null;
  requests: number;
  errors: number;
  inputTokens: bigint;
  outputTokens: bigint;
  cacheReadTokens: bigint;
  cacheWriteTokens: bigint;
  audioTokens: bigint;
  cost: bigint;
}

/** The summed columns of a StatsRow, in either dialect's usage_logs. */
export const SUMMED = ['inputTokens', 'outputTokens', 'cacheReadTokens', 'cacheWriteTokens', 'audioInputTokens', 'audioOutputTokens', 'cost'] as const;

/** How many requests of one (bucket, group) fell into one latency bin. */
export interface LatencyBinRow { bucket: number; grp: string | number | null; bin: number; n: number }

/** Latency bins per doubling: bin k holds latencies in [2^((k-1)/8), 2^(k/8)) ms; bin 0 holds 0 ms. */
export const LATENCY_BINS_PER_OCTAVE = 8;

/**
 * The only dialect-specific expression here: the log-scale latency bin. SQLite (3.35+, math functions)
 * has log2(); the PostgreSQL form is `floor(log(2, greatest(latency_ms, 1)::numeric) * 8) + 1`.
 */
export function latencyBinSql(col: SQL | typeof usageLogs.latencyMs): SQL<number> {
  return sql<number>`case when ${col} < 1 then 0 else cast(log2(${col}) * ${sql.raw(String(LATENCY_BINS_PER_OCTAVE))} as integer) + 1 end`;
}

const GROUP_COLUMN = {
  model: usageLogs.model, channel: usageLogs.channelId, key: usageLogs.apiKeyId, user: usageLogs.userId,
} as const;

/** Usage aggregations and export pages: storage interface. */
export interface UsageStatsStore {
  /** Totals per (bucket, group), ordered by bucket then group; at most `maxRows + 1` rows. */
  aggregate(q: StatsQuery): Promise<StatsRow[]>;
  /** Request counts per (bucket, group, latency bin): the histogram percentiles are read from. */
  latencyHistogram(q: StatsQuery): Promise<LatencyBinRow[]>;
  /**
   * One export page: rows matching `f` after the keyset position `after`, in (created_at, id) order. The
   * keyset (not OFFSET) makes the last page cost what the first does, and ordering by created_at first
   * lets the (…, created_at) indexes serve both the filter and the order, with no sort per page.
   */
  exportPage(f: UsageLogWhere, after: ExportCursor | null, limit: number): Promise<UsageLogRow[]>;
}

/**
 * Aggregations over usage_logs for the statistics endpoints and the keyset pages of the export.
 * Bucketing is integer arithmetic (portable): start of the bucket containing created_at + offset, shifted
 * back by offset. Both queries are bounded by a created_at range, which the (…, created_at) indexes serve.
 */
export class UsageStatsRepo implements UsageStatsStore {
  constructor(private readonly db: Db) {}

  private where(q: StatsQuery): SQL {
    return statsWhere(usageLogs, q);
  }

  private bucket(q: StatsQuery): SQL<number> {
    return statsBucket(usageLogs, q);
  }

  private group(q: StatsQuery): SQL<string | number | null> {
    return q.groupBy === 'none' ? sql<null>`null` : sql`${GROUP_COLUMN[q.groupBy]}`;
  }

  /** Totals per (bucket, group), ordered by bucket then group; at most `maxRows + 1` rows. */
  async aggregate(q: StatsQuery): Promise<StatsRow[]> {
    return this.aggregateRows(q);
  }

  /** `aggregate` on the calling thread (the statistics worker's entry). */
  aggregateRows(q: StatsQuery): StatsRow[] {
    return this.aggregateQuery(q).all().map((r) => {
      const s = (c: (typeof SUMMED)[number]) => joinSum(r[`${c}Hi`], r[`${c}Lo`]);
      return {
        bucket: r.bucket, grp: r.grp, requests: r.requests, errors: r.errors,
        inputTokens: s('inputTokens'), outputTokens: s('outputTokens'), cacheReadTokens: s('cacheReadTokens'),
        cacheWriteTokens: s('cacheWriteTokens'), audioTokens: s('audioInputTokens') + s('audioOutputTokens'), cost: s('cost'),
      };
    });
  }

  /**
   * The statement behind `aggregate` (for EXPLAIN QUERY PLAN in the benchmark). Each token and cost sum is
   * two partial sums (exact-sum.ts): a plain sum() rounds past 2^53 and fails the query past 2^63.
   */
  aggregateQuery(q: StatsQuery) {
    const bucket = this.bucket(q);
    const grp = this.group(q);
    const parts = {} as Record<`${(typeof SUMMED)[number]}${'Hi' | 'Lo'}`, SQL<string>>;
    for (const c of SUMMED) {
      const { hi, lo } = sqliteSumParts(usageLogs[c]);
      parts[`${c}Hi`] = hi;
      parts[`${c}Lo`] = lo;
    }
    return this.db.select({
      bucket: bucket.mapWith(Number).as('bucket'),
      grp: grp.as('grp'),
      requests: count(),
      // At most the row count: a plain sum is exact.
      errors: sum(sql`case when ${usageLogs.status} >= 400 or ${usageLogs.errorCode} <> '' then 1 else 0 end`).mapWith(Number),
      ...parts,
    }).from(usageLogs).where(this.where(q))
      .groupBy(sql`1`, sql`2`).orderBy(sql`1`, sql`2`).limit(q.maxRows + 1);
  }

  /** Request counts per (bucket, group, latency bin): the histogram percentiles are read from. */
  async latencyHistogram(q: StatsQuery): Promise<LatencyBinRow[]> {
    return this.latencyHistogramQuery(q).all();
  }

  latencyHistogramQuery(q: StatsQuery) {
    return this.db.select({
      bucket: this.bucket(q).mapWith(Number).as('bucket'),
      grp: this.group(q).as('grp'),
      bin: latencyBinSql(usageLogs.latencyMs).mapWith(Number).as('bin'),
      n: count(),
    }).from(usageLogs).where(this.where(q)).groupBy(sql`1`, sql`2`, sql`3`);
  }

  /**
   * One export page: rows matching `f` after the keyset position `after`, in (created_at, id) order. The
   * keyset (not OFFSET) makes the last page cost what the first does, and ordering by created_at first
   * lets the (…, created_at) indexes serve both the filter and the order, with no sort per page.
   */
  async exportPage(f: UsageLogWhere, after: ExportCursor | null, limit: number): Promise<UsageLogRow[]> {
    return this.exportPageQuery(f, after, limit).all();
  }

  exportPageQuery(f: UsageLogWhere, after: ExportCursor | null, limit: number) {
    const conds = logConditions(f);
    // Row-value comparison (SQLite 3.15+, PostgreSQL) is one index range, unlike the equivalent OR.
    if (after) conds.push(sql`(${usageLogs.createdAt}, ${usageLogs.id}) > (${after.createdAt}, ${after.id})`);
    return this.db.select().from(usageLogs).where(and(...conds))
      .orderBy(asc(usageLogs.createdAt), asc(usageLogs.id)).limit(limit);
  }
}
