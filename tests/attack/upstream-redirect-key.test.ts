/**
 * Attack from the upstream side: a channel answering `302 Location: <another server>`. Bun's fetch would follow it
 * with the channel's API key; the adapters set `redirect: 'manual'`, which this checks end to end on every route
 * that calls a channel: `/v1/messages` (JSON and stream, native and OpenAI-type), `count_tokens` and the channel
 * test. The second server never gets a request; the client gets 502 `upstream_redirect` (count_tokens: the local
 * estimate; the channel test: a failed test naming the redirect).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, V, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;
let o: Scripted;
let trap: Scripted;
let key: string;
const ids: number[] = [];

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000' });
  trap = upstream('anthropic');
  a = upstream('anthropic');
  o = upstream('openai');
  for (const s of [a, o]) s.fallback = { response: () => new Response(null, { status: 302, headers: { location: `${trap.url}/v1/messages` } }) };
  ids.push(await addChannel(gw, { type: 'anthropic', url: a.url, models: ['claude-x'] }));
  ids.push(await addChannel(gw, { type: 'openai', url: o.url, models: ['gpt-x'] }));
  await setPrice(gw, 'claude-x');
  await setPrice(gw, 'gpt-x');
  key = (await keyedUser(gw, 100_000_000)).key;
});
afterAll(async () => {
  await a.stop();
  await o.stop();
  await trap.stop();
  await gw.stop();
});

for (const model of ['claude-x', 'gpt-x']) {
  for (const stream of [false, true]) {
    test(`/v1/messages, ${model}, ${stream ? 'stream' : 'JSON'}: 502 upstream_redirect, the Location never asked`, async () => {
      const r = await send(gw, key, msg(model, stream ? { stream: true } : {}));
      expect(r.status).toBe(502);
      expect(r.body.error.code).toBe('upstream_redirect');
      expect(trap.hits).toBe(0);
    });
  }
}

test('count_tokens on a native channel: the redirect is not followed, the local estimate answers', async () => {
  const before = a.hits;
  const res = await fetch(`${gw.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, ...V },
    body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'Hi' }] }),
  });
  expect(res.status).toBe(200);
  expect(((await res.json()) as any).input_tokens).toBeGreaterThan(0);
  expect(a.hits).toBe(before + 1); // the channel really was asked
  expect(trap.hits).toBe(0);
});

test('the channel test: a failed test reporting the 302, the Location never asked', async () => {
  for (const id of ids) {
    const r = await gw.api('POST', `/api/channel/${id}/test`);
    expect(r.status).toBe(200);
    expect(r.body.data.success).toBe(false);
    expect(r.body.data.status).toBe(302);
  }
  expect(trap.hits).toBe(0);
});
