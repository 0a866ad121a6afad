/**
 * Attack (PostgreSQL mode): cut one node off from Redis while it serves, hoping it keeps serving after the
 * leader released its holds (other nodes then spend the money those holds covered). Once its renewals have
 * failed for half a lease, the node stops every metered request in flight (503 `admission_lost`), each
 * settled for what it delivered while its hold still counts everywhere. Real gateway; Redis behind a TCP
 * proxy the test cuts; PostgreSQL stays reachable.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { REDIS_TEST_URL } from '../helpers/redis';
import { tcpProxy, type TcpProxy } from '../helpers/tcp-proxy';
import { addChannel, keyedUser, msg, setPrice, upstream, V, type Scripted } from '../e2e/relay-setup';

const LEASE_MS = 3_000;
let gw: TestGateway;
let proxy: TcpProxy;
let up: Scripted;

describe.skipIf(!ON_PG)('a node cut off from Redis mid-request', () => {
  beforeAll(async () => {
    const redis = new URL(REDIS_TEST_URL);
    proxy = tcpProxy({ host: redis.hostname, port: Number(redis.port || 6379) });
    gw = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, HOLD_LEASE_MS: String(LEASE_MS) });
    up = upstream('anthropic');
    await addChannel(gw, { type: 'anthropic', url: up.url, models: ['fence'] });
    await setPrice(gw, 'fence', { input: 1_000_000, output: 1_000_000 });
  });
  afterAll(async () => {
    proxy.up();
    await up.stop();
    await gw.stop();
    proxy.stop();
  });

  test('its streams and JSON requests in flight stop within half a lease plus one renewal, settled and logged; new ones are refused', async () => {
    const u = await keyedUser(gw, 10_000_000);
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    up.queue.push({ text: words, chunkDelayMs: 50 }, { text: 'late', delayMs: 20_000 });
    const headers = { 'content-type': 'application/json', 'x-api-key': u.key, ...V };
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify(msg('fence', { stream: true, max_tokens: 1000 })) });
    expect(res.status).toBe(200);
    const streamId = res.headers.get('request-id')!;
    const json = fetch(`${gw.url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify(msg('fence', { max_tokens: 1000 })) });
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while (!text.includes('content_block_delta')) text += dec.decode((await reader.read()).value);
    await Bun.sleep(100);
    proxy.down();
    const cut = performance.now();
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += dec.decode(r.value);
    const stoppedAfter = performance.now() - cut;
    console.log(`Redis cut: the stream stopped ${stoppedAfter.toFixed(0)} ms later (lease ${LEASE_MS} ms)`);
    // The last renewal that worked was at most one interval (lease/3) before the cut; the node stops within
    // half a lease of it plus one interval of detection, before the lease itself is over.
    expect(stoppedAfter).toBeLessThan(LEASE_MS / 2 + LEASE_MS / 3 + 300);
    expect(text).toContain('event: error');
    expect(text).toContain('lost its admission store');
    expect(text).not.toContain('message_stop');
    const j = await json;
    expect(j.status).toBe(503);
    expect(((await j.json()) as any).error.code).toBe('admission_lost');
    // Settled in PostgreSQL (still reachable) for what the stream delivered.
    const row = await gw.db.get('select cost, error_code from usage_logs where request_id = ?', streamId) as { cost: number; error_code: string } | null;
    expect(row?.error_code).toBe('admission_lost');
    expect(row!.cost).toBeGreaterThan(0);
    expect(gw.services.relay.inflight.size).toBe(0);
    expect(gw.logs.some((l) => l.includes('holds.lost'))).toBe(true);
    // While Redis stays away nothing new is admitted, and the refusal is immediate.
    const t0 = performance.now();
    const refused = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify(msg('fence')) });
    expect(refused.status).toBe(503);
    expect(performance.now() - t0).toBeLessThan(500);
    console.log(`a new request while Redis is away: ${refused.status} after ${(performance.now() - t0).toFixed(0)} ms`);
    proxy.up();
  }, 20_000);
});
