import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  // /metrics counts one process: every request goes to node 1.
  gw = nodeOne(await startGateway());
  up = upstream('anthropic', { text: 'hi', usage: { input: 100, output: 20, cacheRead: 50 } });
});
afterAll(async () => { await gw.stop(); await up.stop(); });

const scrape = async (token: string | null = gw.rootToken) => {
  const res = await fetch(`${gw.url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() };
};
/** The value of one sample line, e.g. value(text, 'gateway_tokens_total{model="m",kind="input"}'). */
const value = (text: string, series: string) => Number(text.split('\n').find((l) => l.startsWith(`${series} `))?.split(' ')[1] ?? NaN);

test('/metrics is for admins: 401 anonymous, 403 for a user, Prometheus text for an admin', async () => {
  expect((await scrape(null)).status).toBe(401);
  expect((await scrape((await makeUser(gw, 1)).token)).status).toBe(403);
  const ok = await scrape((await makeUser(gw, 10)).token);
  expect(ok.status).toBe(200);
  expect(ok.type).toContain('text/plain');
  expect(ok.text).toContain('# TYPE gateway_http_requests_total counter');
});

test('requests, upstream attempts, tokens, charges and channel status are counted', async () => {
  const ch = await addChannel(gw, { type: 'anthropic', url: up.url, models: ['metric-model'] });
  await setPrice(gw, 'metric-model', { input: 1_000_000, output: 2_000_000, cache_read: 100_000 });
  const u = await keyedUser(gw);
  for (let i = 0; i < 3; i++) expect((await send(gw, u.key, msg('metric-model'))).status).toBe(200);
  expect((await send(gw, u.key, msg('metric-model', { max_tokens: 'x' }))).status).toBe(400);
  const { text } = await scrape();
  expect(value(text, 'gateway_http_requests_total{method="POST",route="/v1/messages",status="200"}')).toBe(3);
  expect(value(text, 'gateway_http_requests_total{method="POST",route="/v1/messages",status="400"}')).toBe(1);
  expect(value(text, `gateway_upstream_attempts_total{channel="${ch}",result="ok"}`)).toBe(3);
  expect(value(text, 'gateway_tokens_total{model="metric-model",kind="input"}')).toBe(300);
  expect(value(text, 'gateway_tokens_total{model="metric-model",kind="output"}')).toBe(60);
  expect(value(text, 'gateway_tokens_total{model="metric-model",kind="cache_read"}')).toBe(150);
  // 100 in + 20 out + 50 cached per request: (100·1e6 + 20·2e6 + 50·1e5) / 1e6 = 145 quota units each.
  expect(value(text, 'gateway_quota_charged_total{model="metric-model"}')).toBe(3 * 145);
  expect(value(text, 'gateway_metered_requests_total{model="metric-model",kind="messages",status="200"}')).toBe(3);
  expect(value(text, `gateway_channel_status{channel="${ch}",name="ch-anthropic",type="anthropic"}`)).toBe(1);
  expect(value(text, 'gateway_http_request_duration_seconds_count{route="/v1/messages"}')).toBe(4);
  expect(text).toContain('gateway_settlements_queued');
  expect(text).toContain('gateway_realtime_sessions 0');
});

test('unknown paths share one label, so no caller can grow the series', async () => {
  for (const p of ['/nope-1', '/nope-2', '/nope-3']) await fetch(gw.url + p);
  const { text } = await scrape();
  expect(value(text, 'gateway_http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(3);
  expect(text).not.toContain('nope-1');
});
