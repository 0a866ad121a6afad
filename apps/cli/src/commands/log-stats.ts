/** `log stats`: usage per day or hour as a table and a sparkline chart of requests and cost. */
import type { Command } from 'commander';
import type { App } from '../core/context';
import { parseId, parseIntStrict, parseTime } from '../core/fields';
import { col, table } from '../core/output';
import { apiParams } from '../core/params';
import { addFilters, scopedQuery, type Filter } from '../core/scoped-list';
import { chart } from '../core/sparkline';

const BY = ['model', 'channel', 'key', 'user', 'none'] as const;

function bucketLabel(bucket: number, offsetMin: number, hourly: boolean): string {
  const iso = new Date((bucket + offsetMin * 60) * 1000).toISOString();
  return hourly ? `${iso.slice(0, 10)} ${iso.slice(11, 13)}h` : iso.slice(0, 10);
}

/** Per-bucket totals over all groups, with empty buckets as zeros, for the chart. */
export function series(data: any, field: 'requests' | 'cost'): number[] {
  const size = data.granularity === 'hour' ? 3600 : 86_400;
  const off = data.tz_offset_minutes * 60;
  const first = Math.floor((data.start_timestamp + off) / size) * size - off;
  const n = Math.floor((data.end_timestamp - first) / size) + 1;
  const out = new Array<number>(Math.max(0, n)).fill(0);
  for (const it of data.items) {
    const i = Math.round((it.bucket - first) / size);
    if (i >= 0 && i < n) out[i]! += it[field];
  }
  return out;
}

export function statsText(data: any): string {
  const hourly = data.granularity === 'hour';
  const columns = [
    col('BUCKET', 'bucket', { fmt: (v) => bucketLabel(v as number, data.tz_offset_minutes, hourly) }),
    ...(data.group_by === 'none' ? [] : [col(data.group_by.toUpperCase(), 'group', { right: data.group_by !== 'model' })]),
    col('REQS', 'requests', { right: true }), col('ERRS', 'errors', { right: true }), col('IN', 'input_tokens', { right: true }),
    col('OUT', 'output_tokens', { right: true }), col('CACHE R', 'cache_read_tokens', { right: true }), col('CACHE W', 'cache_write_tokens', { right: true }),
    col('AUDIO', 'audio_tokens', { right: true }), col('COST', 'cost', { right: true }),
    col('P50 MS', 'latency_p50_ms', { right: true }), col('P99 MS', 'latency_p99_ms', { right: true }),
  ];
  const from = bucketLabel(data.start_timestamp, data.tz_offset_minutes, hourly);
  const to = bucketLabel(data.end_timestamp, data.tz_offset_minutes, hourly);
  const head = `${from} .. ${to} (${hourly ? 'per hour' : 'per day'}, UTC${data.tz_offset_minutes >= 0 ? '+' : '-'}${Math.abs(data.tz_offset_minutes)}min)\n`;
  return table(data.items, columns) + '\n' + head
    + chart([{ label: 'requests', values: series(data, 'requests') }, { label: 'cost', values: series(data, 'cost') }]);
}

const FILTERS: Filter[] = [
  { flags: '--from <time>', desc: 'from this time (unix seconds or ISO date), inclusive; default 30 days (24 h hourly) before --to', query: 'start_timestamp', parse: parseTime },
  { flags: '--to <time>', desc: 'up to this time, inclusive; default now', query: 'end_timestamp', parse: parseTime },
  { flags: '--by <dimension>', desc: 'group by one dimension (channel and user: admins)', query: 'group_by', choices: BY },
  { flags: '--granularity <g>', desc: 'bucket width: day (≤ 400 days) or hour (≤ 31 days)', query: 'granularity', choices: ['day', 'hour'] },
  { flags: '--tz-offset <minutes>', desc: 'minutes east of UTC where days start, e.g. 60 or -300', query: 'tz_offset_minutes', parse: parseIntStrict },
  { flags: '--model <model>', desc: 'only this requested model', query: 'model' },
  { flags: '--key-id <id>', desc: 'only this API key', query: 'token_id', parse: parseId },
  { flags: '--user-id <id>', desc: 'only this user', query: 'user_id', parse: parseId, adminOnly: true },
  { flags: '--channel-id <id>', desc: 'only this channel', query: 'channel_id', parse: parseId, adminOnly: true },
];

export function registerLogStats(group: Command, app: App): void {
  const cmd = group.command('stats')
    .description('Usage per day or hour: requests, errors, tokens, cost, p50/p99 latency, and a chart')
    .option('--self', 'only your own (the default for non-admins)');
  const options = addFilters(cmd, FILTERS);
  apiParams(cmd, Object.fromEntries(options.map(({ f, o }) => [f.query, { flag: o.long!, values: f.choices?.join(', ') }])));
  cmd.addHelpText('after', '\nLatency percentiles come from a log-scale histogram: within 4.5% + 1 ms of the exact value.\n\nExamples:\n'
    + '  $ gw log stats --from 2026-01-01 --to 2026-12-31 --by model\n  $ gw log stats --granularity hour --by user --from 2026-11-01\n  $ gw log stats --self --json');
  cmd.action(app.action(async (ctx, _a, opts) => {
    // `--by channel|user` is admin-only too, but only for some values: the server answers that one.
    const { path, query } = await scopedQuery(ctx, { what: 'usage statistics', adminPath: '/api/log/stats', selfPath: '/api/log/stats/self' }, options, opts);
    const data = await ctx.client().call('GET', path, { query });
    ctx.print(data, () => statsText(data));
  }));
}
