/**
 * An upstream (a hostile or broken reseller) that starts an answer and then sends pings forever: each ping is
 * upstream activity, so the channel's idle limit never falls due, and the stream held the client and an
 * upstream slot for ever. STREAM_MAX_DURATION_MS bounds a stream's whole life: past it the stream ends with an
 * error event, billed for what was delivered, counted against the channel.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { SseParser } from '@gw/formats';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const cancelled = { n: 0 };
const enc = new TextEncoder();
const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
const HEAD = [
  sse('message_start', { type: 'message_start', message: { id: 'msg_p', type: 'message', role: 'assistant', model: 'up', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 11, output_tokens: 1 } } }),
  sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
  sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'thinking about it for ever' } }),
];

beforeAll(async () => {
  gw = await startGateway({ STREAM_MAX_DURATION_MS: '1500', RELAY_PROBE_INTERVAL_MS: '3600000' });
  up = upstream('anthropic');
  let timer: ReturnType<typeof setInterval> | undefined;
  up.fallback = {
    response: () => new Response(new ReadableStream({
      start(c) {
        c.enqueue(enc.encode(HEAD.join('')));
        timer = setInterval(() => { try { c.enqueue(enc.encode(sse('ping', { type: 'ping' }))); } catch { clearInterval(timer); } }, 100);
      },
      cancel() { clearInterval(timer); cancelled.n++; },
    }), { headers: { 'content-type': 'text/event-stream' } }),
  };
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['pinger'] });
  await setPrice(gw, 'pinger');
  user = await keyedUser(gw, 10_000_000);
}, 30_000);
afterAll(async () => { await up.stop(); await gw.stop(); });

test('pings for ever: the stream ends at STREAM_MAX_DURATION_MS with an error event, billed once, upstream closed', async () => {
  const t0 = performance.now();
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': user.key, ...V },
    body: JSON.stringify({ model: 'pinger', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
    signal: AbortSignal.timeout(8000),
  });
  expect(res.status).toBe(200);
  const text = await res.text().catch((e) => `aborted: ${e}`);
  const took = performance.now() - t0;
  expect(text).not.toStartWith('aborted');
  expect(took).toBeGreaterThanOrEqual(1400);
  expect(took).toBeLessThan(6000);
  const events = new SseParser().push(text);
  const last = events.at(-1)!;
  expect(last.event).toBe('error');
  expect(JSON.parse(last.data).error.message).toContain('1500 ms');
  for (let i = 0; i < 50 && cancelled.n === 0; i++) await Bun.sleep(20);
  expect(cancelled.n).toBe(1);
  gw.services.relay.quota.flush();
  const row: any = await gw.db.get('select * from usage_logs where request_id = ?', res.headers.get('request-id')!);
  expect(row.error_code).toBe('upstream_stream_too_long');
  expect(row.input_tokens).toBe(11);
  expect(row.output_tokens).toBeGreaterThan(0);
  expect(row.cost).toBeGreaterThan(0);
}, 15_000);
