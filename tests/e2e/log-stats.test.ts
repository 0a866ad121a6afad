/**
 * GET /api/log/stats and /api/log/stats/self over real HTTP: bucketing (UTC and with an offset), grouping,
 * totals, error counts, latency percentiles against the exact values, scoping of /self, and every bad
 * query answered with the JSON error object (never a 5xx).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
let alice: { id: number; token: string };
let bob: { id: number; token: string };
const DAY = 86_400;
/** A fixed UTC midnight, so bucket boundaries are known. */
const D0 = Date.UTC(2026, 9, 1) / 1000;
let seq = 0;

interface Seed { userId: number; apiKeyId?: number; channelId?: number | null; model: string; at: number; latencyMs: number; status?: number; errorCode?: string; cost?: number; audio?: number }
async function seed(r: Seed) {
  await gw.services.relay.usageLogs.insertOnce({
    requestId: `req_stats_${seq++}`, userId: r.userId, apiKeyId: r.apiKeyId ?? r.userId * 10, channelId: r.channelId ?? 1, model: r.model,
    status: r.status ?? 200, errorCode: r.errorCode ?? '', inputTokens: 10, outputTokens: 5, cacheReadTokens: 2, cacheWriteTokens: 1,
    audioInputTokens: r.audio ?? 0, audioOutputTokens: r.audio ?? 0, cost: r.cost ?? 100, latencyMs: r.latencyMs, createdAt: r.at,
  });
}

/** Exact nearest-rank percentile. */
function exact(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.max(1, Math.ceil(p * s.length)) - 1]!;
}

const latA: number[] = [];
beforeAll(async () => {
  gw = await startGateway();
  alice = await makeUser(gw);
  bob = await makeUser(gw);
  // Day 0: 200 alice requests on model-a with spread-out latencies, 3 of them failures; 1 bob request on model-b.
  for (let i = 0; i < 200; i++) {
    const lat = Math.round(5 + (i * 7919) % 4000 + (i % 10 === 0 ? 20_000 : 0));
    latA.push(lat);
    await seed({ userId: alice.id, model: 'model-a', at: D0 + 60 + i * 60, latencyMs: lat, status: i < 2 ? 502 : 200, errorCode: i === 2 ? 'stream_cut' : i < 2 ? 'upstream_error' : '', cost: i < 2 ? 0 : 100 });
  }
  await seed({ userId: bob.id, model: 'model-b', at: D0 + 3_600, latencyMs: 40, audio: 7, channelId: 2 });
  // Day 1 at 23:30 UTC: with tz +60 minutes it belongs to local day 2.
  await seed({ userId: alice.id, model: 'model-a', at: D0 + DAY + 23 * 3600 + 1800, latencyMs: 0 });
  // Outside the queried range.
  await seed({ userId: alice.id, model: 'model-a', at: D0 - 1, latencyMs: 10 });
}, 60_000); // 203 inserts one by one: past Bun's 5 s default on PostgreSQL when the machine is loaded
afterAll(async () => { await gw.stop(); });

const q = (params: Record<string, string | number>) => new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])).toString();
const range = { start_timestamp: D0, end_timestamp: D0 + 3 * DAY - 1 };

describe('admin stats', () => {
  test('daily by model: totals, errors, audio, and percentiles within 4.5% + 1 ms of exact', async () => {
    const r = await gw.api('GET', `/api/log/stats?${q({ ...range, group_by: 'model' })}`);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ start_timestamp: D0, end_timestamp: D0 + 3 * DAY - 1, granularity: 'day', tz_offset_minutes: 0, group_by: 'model' });
    const items = r.body.data.items;
    expect(items.map((i: any) => [i.bucket, i.group, i.requests])).toEqual([
      [D0, 'model-a', 200], [D0, 'model-b', 1], [D0 + DAY, 'model-a', 1],
    ]);
    const a = items[0];
    expect(a).toMatchObject({
      errors: 3, input_tokens: 2000, output_tokens: 1000, cache_read_tokens: 400, cache_write_tokens: 200, audio_tokens: 0, cost: 198 * 100,
    });
    expect(items[1]).toMatchObject({ audio_tokens: 14, errors: 0, latency_p50_ms: 40, latency_p99_ms: 40 });
    expect(items[2]).toMatchObject({ latency_p50_ms: 0, latency_p99_ms: 0 });
    for (const [field, p] of [['latency_p50_ms', 0.5], ['latency_p99_ms', 0.99]] as const) {
      const want = exact(latA, p);
      expect({ field, off: Math.abs(a[field] - want) <= 1 + 0.045 * want }).toEqual({ field, off: true });
    }
  });

  test('tz offset moves day boundaries to local midnight', async () => {
    const r = await gw.api('GET', `/api/log/stats?${q({ ...range, tz_offset_minutes: 60 })}`);
    expect(r.status).toBe(200);
    // Local midnight of UTC+1 is 23:00 UTC the day before: buckets start at D0 - 3600 + k days.
    expect(r.body.data.items.map((i: any) => [i.bucket, i.group, i.requests])).toEqual([
      [D0 - 3600, null, 201], [D0 + 2 * DAY - 3600, null, 1],
    ]);
  });

  test('hourly by user with filters', async () => {
    const r = await gw.api('GET', `/api/log/stats?${q({ start_timestamp: D0, end_timestamp: D0 + DAY - 1, granularity: 'hour', group_by: 'user' })}`);
    expect(r.status).toBe(200);
    const items = r.body.data.items as any[];
    expect(items.filter((i) => i.group === bob.id)).toMatchObject([{ bucket: D0 + 3600, requests: 1 }]);
    // 200 alice requests one per minute from 00:01: 59 in hour 0, 60 in hours 1 and 2, 21 in hour 3.
    expect(items.filter((i) => i.group === alice.id).map((i) => [i.bucket, i.requests]))
      .toEqual([[D0, 59], [D0 + 3600, 60], [D0 + 7200, 60], [D0 + 10800, 21]]);
    const filtered = await gw.api('GET', `/api/log/stats?${q({ ...range, group_by: 'channel', channel_id: 2 })}`);
    expect(filtered.body.data.items).toMatchObject([{ group: 2, requests: 1 }]);
    const byKey = await gw.api('GET', `/api/log/stats?${q({ ...range, group_by: 'key', token_id: bob.id * 10 })}`);
    expect(byKey.body.data.items).toMatchObject([{ group: bob.id * 10, requests: 1 }]);
  });
});

describe('self stats', () => {
  test('only the caller\'s rows, whatever user filter is passed', async () => {
    const r = await gw.api('GET', `/api/log/stats/self?${q({ ...range, user_id: alice.id })}`, undefined, bob.token);
    expect(r.status).toBe(200);
    expect(r.body.data.items).toMatchObject([{ bucket: D0, group: null, requests: 1, audio_tokens: 14 }]);
    const mine = await gw.api('GET', `/api/log/stats/self?${q({ ...range, group_by: 'model' })}`, undefined, alice.token);
    expect(mine.body.data.items.map((i: any) => i.requests)).toEqual([200, 1]);
  });

  test('users cannot group by channel or user, nor read everyone\'s stats', async () => {
    for (const by of ['channel', 'user']) {
      const r = await gw.api('GET', `/api/log/stats/self?group_by=${by}`, undefined, bob.token);
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe('group_by');
    }
    expect((await gw.api('GET', '/api/log/stats', undefined, bob.token)).status).toBe(403);
    expect((await gw.api('GET', '/api/log/stats/self', undefined, null)).status).toBe(401);
  });
});

describe('bounds and bad input', () => {
  const now = Math.floor(Date.now() / 1000);
  const cases: Array<[string, string, string]> = [
    [q({ granularity: 'hour', start_timestamp: now - 31 * DAY, end_timestamp: now }), 'range_too_large', 'start_timestamp'],
    [q({ start_timestamp: now - 400 * DAY, end_timestamp: now }), 'range_too_large', 'start_timestamp'],
    [q({ start_timestamp: now, end_timestamp: now - 1 }), 'invalid_range', 'start_timestamp'],
    [q({ granularity: 'week' }), '', 'granularity'],
    [q({ group_by: 'ip' }), '', 'group_by'],
    [q({ tz_offset_minutes: 841 }), '', 'tz_offset_minutes'],
    [q({ tz_offset_minutes: 1.5 }), '', 'tz_offset_minutes'],
    [q({ start_timestamp: 'yesterday' }), '', 'start_timestamp'],
    [q({ start_timestamp: -5 }), '', 'start_timestamp'],
    [q({ end_timestamp: 253_402_300_800 }), 'out_of_range', 'end_timestamp'],
    [q({ user_id: 0 }), '', 'user_id'],
  ];
  test.each(cases)('?%s → 400 %s', async (query, code, param) => {
    const r = await gw.api('GET', `/api/log/stats?${query}`);
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe(param);
    if (code) expect(r.body.error.code).toBe(code);
    expect(Object.values(r.body.error).every((v) => typeof v === 'string')).toBe(true);
  });

  test('the widest allowed ranges answer', async () => {
    expect((await gw.api('GET', `/api/log/stats?${q({ granularity: 'hour', start_timestamp: now - 31 * DAY + 1, end_timestamp: now })}`)).status).toBe(200);
    const year = await gw.api('GET', `/api/log/stats?${q({ start_timestamp: now - 400 * DAY + 1, end_timestamp: now, group_by: 'user' })}`);
    expect(year.status).toBe(200);
  });
});
