/**
 * A 429 from a rate limit tells the client when to retry, and Anthropic SDKs and Claude Code wait exactly that
 * long. Tokens per minute fill a window with large hits: at the window's end that window still weighs almost
 * whole in the sliding estimate, so a retry-after pointing at the end (what it said) sent every honouring client
 * into a second 429 and used its retries up. It now says when the request would pass.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;

beforeAll(async () => {
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['claude-x'] });
  expect((await gw.api('PUT', '/api/pricing/', { model: 'claude-x', input: 1, output: 1, cache_read: 0, cache_write: 0 })).status).toBe(200);
});
afterAll(async () => {
  await up.stop();
  await gw.stop();
});

test('tokens per minute: retry-after covers the full window still weighing after its end', async () => {
  const u = await keyedUser(gw, 100_000_000, { rate_limit_tpm: 1 });
  const body = msg('claude-x', { max_tokens: 500 });
  // What admission counts for this request, from the refusal of a request larger than the limit.
  const big = await send(gw, u.key, body);
  expect(big.status).toBe(429);
  expect(big.headers.get('retry-after')).toBeNull();
  const n = Number(/may use (\d+)/.exec(big.body.error.message)![1]);
  expect(n).toBeGreaterThanOrEqual(500);
  // Room for exactly two; the change applies to the next request.
  expect((await gw.api('PUT', '/api/token/', { id: u.keyId, rate_limit_tpm: 2 * n })).status).toBe(200);
  await clearOfWindowEdge(10_000);
  for (let i = 0; i < 2; i++) expect((await send(gw, u.key, body)).status).toBe(200);
  const r = await send(gw, u.key, body);
  const endMs = 60_000 - (Date.now() % 60_000);
  expect(r.status).toBe(429);
  expect(r.body.error).toMatchObject({ type: 'rate_limit_error', code: 'key_tpm_exceeded' });
  // 2n counted this minute; the next one passes once 2n × (1 − elapsed share) < n + 1, about 30 s into the next
  // minute. The window's end would be refused again.
  const expected = (endMs + 60_000 * (1 - (n + 1) / (2 * n))) / 1000;
  const retry = Number(r.headers.get('retry-after'));
  expect(retry).toBeGreaterThanOrEqual(Math.floor(expected));
  expect(retry).toBeLessThanOrEqual(Math.ceil(expected) + 1);
}, 30_000);
