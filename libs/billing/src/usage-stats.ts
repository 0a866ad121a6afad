import { IdInput } from '@gw/core/id-input';
import { errors } from '@gw/core';
import { LATENCY_BINS_PER_OCTAVE, type LatencyBinRow, type StatsGroupBy, type StatsQuery, type StatsReader, type StatsRow } from '@gw/db';
import { Type, type Static } from '@sinclair/typebox';

const DAY = 86_400;
const HOUR = 3_600;

/** Widest range per granularity (about 400 daily or 744 hourly buckets) and the most rows one answer holds. */
/** Which of `keyIds` the caller may not see. */
export type KeysHidden = (keyIds: number[]) => Promise<ReadonlySet<number>>;

/** The distinct non-null group ids of a group_by=key result. */
const groupIds = (...lists: { grp: unknown }[][]): number[] =>
  [...new Set(lists.flatMap((l) => l.filter((r) => r.grp !== null).map((r) => Number(r.grp))))];

export const STATS_LIMITS = { maxDays: 400, maxHourlyDays: 31, maxRows: 50_000 } as const;

const int = (description: string, extra: object = {}) => Type.Integer({ description, ...extra });
/** 9999-12-31T23:59:59Z: later instants are typing mistakes, not ranges. */
const MAX_TIME = 253_402_300_799;
const groupBy = (values: StatsGroupBy[]) => Type.Union(values.map((v) => Type.Literal(v)), {
  default: 'none', description: `One dimension to group by: ${values.join(', ')}.`,
});

/** Query of GET /api/log/stats/self (the caller's own rows: no user or channel dimension). */
export const SelfStatsQuery = Type.Object({
  start_timestamp: Type.Optional(int('Unix seconds, inclusive (default: 30 days, or 24 hours when hourly, before the end).', { minimum: 0, maximum: MAX_TIME })),
  end_timestamp: Type.Optional(int('Unix seconds, inclusive (default: now).', { minimum: 0, maximum: MAX_TIME })),
  granularity: Type.Optional(Type.Union([Type.Literal('day'), Type.Literal('hour')], {
    default: 'day', description: `Bucket width. At most ${STATS_LIMITS.maxDays} days daily, ${STATS_LIMITS.maxHourlyDays} days hourly.`,
  })),
  tz_offset_minutes: Type.Optional(int('Minutes east of UTC where days start (e.g. 120, -300); default 0.', { minimum: -840, maximum: 840 })),
  group_by: Type.Optional(groupBy(['model', 'key', 'none'])),
  model: Type.Optional(Type.String({ maxLength: 200 })),
  token_id: Type.Optional(IdInput({ description: 'Relay API key id' })),
});

/** Query of GET /api/log/stats (admins: every row, two more dimensions and filters). */
export const StatsQueryParams = Type.Object({
  ...SelfStatsQuery.properties,
  group_by: Type.Optional(groupBy(['model', 'channel', 'key', 'user', 'none'])),
  user_id: Type.Optional(IdInput({ description: 'Only this user' })),
  channel_id: Type.Optional(IdInput({ description: 'Only this channel' })),
});
export type StatsQueryParams = Static<typeof StatsQueryParams>;

const n = (description: string) => Type.Integer({ description });

/** One (bucket, group) row of the statistics. */
export const StatsRowView = Type.Object({
  bucket: n('Bucket start, unix seconds (local midnight or hour start for tz_offset_minutes).'),
  group: Type.Union([Type.String(), Type.Integer(), Type.Null()], { description: 'Model name, channel/key/user id; null for group_by=none or requests no channel served.' }),
  requests: n('Requests (messages requests and realtime responses).'),
  errors: n('Requests with status >= 400 or a non-empty error_code.'),
  input_tokens: n(''), output_tokens: n(''), cache_read_tokens: n(''), cache_write_tokens: n(''),
  audio_tokens: n('Realtime audio input + output tokens.'),
  cost: n('Quota units charged.'),
  latency_p50_ms: n('Median latency_ms, from a log-scale histogram (8 bins per doubling): within 4.5% + 1 ms of the exact nearest-rank value.'),
  latency_p99_ms: n('99th percentile latency_ms, same method and accuracy.'),
  exact: Type.Optional(Type.Record(Type.String(), Type.String({ pattern: '^-?[0-9]+$' }), {
    description: 'Only on a row where a token or cost sum passed 2^53 − 1 (9007199254740991), the most a JSON number carries exactly: that field then holds 2^53 − 1, and this maps its name to the exact sum in decimal (e.g. {"cost": "18014398509481982"}).',
  })),
});
export type StatsRowView = Static<typeof StatsRowView>;

export const StatsView = Type.Object({
  start_timestamp: n(''), end_timestamp: n(''),
  granularity: Type.String(), tz_offset_minutes: n(''), group_by: Type.String(),
  items: Type.Array(StatsRowView),
});
export type StatsView = Static<typeof StatsView>;

/**
 * The value a histogram bin stands for: the geometric middle of [2^((k-1)/B), 2^(k/B)), so the answer is
 * off by at most 2^(1/2B) - 1 (4.4% for B = 8) relative to any latency inside the bin, plus up to 1 ms from rounding to
 * whole milliseconds.
 */
export function binValue(bin: number): number {
  return bin <= 0 ? 0 : Math.round(2 ** ((bin - 0.5) / LATENCY_BINS_PER_OCTAVE));
}

/** Nearest-rank percentile `p` (0..1] of a histogram given as (bin, count) pairs in any order. */
export function percentileOf(bins: { bin: number; n: number }[], p: number): number {
  const sorted = [...bins].sort((a, b) => a.bin - b.bin);
  const total = sorted.reduce((s, b) => s + b.n, 0);
  if (total === 0) return 0;
  const rank = Math.max(1, Math.ceil(p * total));
  let seen = 0;
  for (const b of sorted) {
    seen += b.n;
    if (seen >= rank) return binValue(b.bin);
  }
  return binValue(sorted[sorted.length - 1]!.bin);
}

/** Resolves defaults and refuses ranges beyond the limits (400, never a slow query). */
export function resolveRange(q: Pick<StatsQueryParams, 'start_timestamp' | 'end_timestamp' | 'granularity'>, now: number) {
  const hourly = q.granularity === 'hour';
  const to = q.end_timestamp ?? now;
  const from = q.start_timestamp ?? Math.max(0, to - (hourly ? DAY : 30 * DAY) + 1);
  if (from > to) throw errors.badRequest('invalid_range', 'start_timestamp is after end_timestamp', 'start_timestamp');
  const maxDays = hourly ? STATS_LIMITS.maxHourlyDays : STATS_LIMITS.maxDays;
  if (to - from >= maxDays * DAY) {
    throw errors.badRequest('range_too_large', `At most ${maxDays} days per ${hourly ? 'hourly' : 'daily'} query`, 'start_timestamp');
  }
  return { from, to, bucketSeconds: hourly ? HOUR : DAY };
}

/**
 * A sum as the API shows it: the number while it is exact in JSON (|v| ≤ 2^53 − 1); beyond, the counters'
 * cap 2^53 − 1 (or its negative), with the exact decimal recorded in `exact` under the field's name.
 */
export function shownSum(v: bigint, field: string, exact: Record<string, string>): number {
  if (v <= MAX_JSON && v >= -MAX_JSON) return Number(v);
  exact[field] = v.toString();
  return v > 0n ? Number.MAX_SAFE_INTEGER : -Number.MAX_SAFE_INTEGER;
}

const MAX_JSON = BigInt(Number.MAX_SAFE_INTEGER);

const key = (bucket: number, grp: unknown) => `${bucket}\u0000${grp === null ? '\u0001' : String(grp)}`;

/** Rows of the same bucket and group summed into one (first one's place kept); their latency bins just add up. */
function mergeGroups(rows: StatsRow[]): StatsRow[] {
  const byKey = new Map<string, StatsRow>();
  for (const r of rows) {
    const k = key(r.bucket, r.grp);
    const m = byKey.get(k);
    if (!m) { byKey.set(k, { ...r }); continue; }
    m.requests += r.requests;
    m.errors += r.errors;
    m.inputTokens += r.inputTokens; m.outputTokens += r.outputTokens; m.cacheReadTokens += r.cacheReadTokens;
    m.cacheWriteTokens += r.cacheWriteTokens; m.audioTokens += r.audioTokens; m.cost += r.cost;
  }
  return [...byKey.values()];
}

/** Usage statistics over usage_logs: totals and latency percentiles per time bucket and group. */
export class UsageStatsService {
  constructor(private readonly reader: StatsReader, private readonly now = () => Math.floor(Date.now() / 1000)) {}

  /** The repository query for API parameters (validated range); `ownerId` as for `stats`. */
  query(q: StatsQueryParams, ownerId?: number): StatsQuery {
    return {
      ...resolveRange(q, this.now()), offsetSeconds: (q.tz_offset_minutes ?? 0) * 60, groupBy: q.group_by ?? 'none', maxRows: STATS_LIMITS.maxRows,
      userId: ownerId ?? q.user_id, apiKeyId: q.token_id, channelId: ownerId === undefined ? q.channel_id : undefined, model: q.model,
    };
  }

  /**
   * `ownerId` restricts the rows to one user whatever the query says (the /self route). `keysHidden(keyIds)`: those
   * of the keys the caller may not see (an admin below root, root's and other admins' keys, deleted ones included):
   * a `token_id` naming one matches nothing, and `group_by=key` puts their rows in the `null` group, summed with
   * the other hidden keys'. It is asked once, for the keys the result names, and only for a result within maxRows.
   */
  async stats(q: StatsQueryParams, ownerId?: number, keysHidden?: KeysHidden): Promise<StatsView> {
    const sq = this.query(q, ownerId);
    const none = keysHidden && sq.apiKeyId !== undefined && (await keysHidden([sq.apiKeyId])).has(sq.apiKeyId);
    const read = none ? { rows: [], hist: [] } : await this.reader.read(sq);
    // Before the keys are looked up: the answer is this 400 whatever they hide, and their owners may be reads.
    if (read.rows.length > STATS_LIMITS.maxRows) {
      throw errors.badRequest('too_many_rows', `More than ${STATS_LIMITS.maxRows} bucket/group rows: narrow the range, use daily buckets or filter`, 'group_by');
    }
    const hidden = keysHidden && sq.groupBy === 'key' ? await keysHidden(groupIds(read.rows, read.hist)) : undefined;
    const masked = <T extends { grp: unknown }>(r: T): T => (r.grp !== null && hidden!.has(Number(r.grp)) ? { ...r, grp: null } : r);
    const rows = hidden ? mergeGroups(read.rows.map(masked)) : read.rows;
    const bins = hidden ? read.hist.map(masked) : read.hist;
    const hist = new Map<string, LatencyBinRow[]>();
    for (const h of bins) {
      const k = key(h.bucket, h.grp);
      (hist.get(k) ?? hist.set(k, []).get(k)!).push(h);
    }
    return {
      start_timestamp: sq.from, end_timestamp: sq.to, granularity: q.granularity ?? 'day', tz_offset_minutes: sq.offsetSeconds / 60, group_by: sq.groupBy,
      items: rows.map((r) => {
        const bins = hist.get(key(r.bucket, r.grp)) ?? [];
        const exact: Record<string, string> = {};
        const row: StatsRowView = {
          bucket: r.bucket, group: r.grp, requests: r.requests, errors: r.errors,
          input_tokens: shownSum(r.inputTokens, 'input_tokens', exact), output_tokens: shownSum(r.outputTokens, 'output_tokens', exact),
          cache_read_tokens: shownSum(r.cacheReadTokens, 'cache_read_tokens', exact), cache_write_tokens: shownSum(r.cacheWriteTokens, 'cache_write_tokens', exact),
          audio_tokens: shownSum(r.audioTokens, 'audio_tokens', exact), cost: shownSum(r.cost, 'cost', exact),
          latency_p50_ms: percentileOf(bins, 0.5), latency_p99_ms: percentileOf(bins, 0.99),
        };
        if (Object.keys(exact).length) row.exact = exact;
        return row;
      }),
    };
  }
}
