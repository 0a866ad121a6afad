/**
 * An operator disables a channel while a request is on it, and the upstream then refuses that request's key
 * (401). The disabled channel is left alone: its key is not probed, the request is not sent again with the
 * channel's other keys, and no key's status changes. It moves on to another channel of the model.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
const doubles: UpstreamDouble[] = [];
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const d of doubles) await d.stop(); await gw.stop(); });

test('a key refusal that arrives after the operator disabled the channel probes nothing and tries none of its other keys', async () => {
  const model = 'disable-inflight';
  await setPrice(gw, model);
  const node = nodeOne(gw);
  const refusing = startAnthropicUpstream({ maxRecorded: 100 });
  const other = startAnthropicUpstream({ maxRecorded: 100 });
  doubles.push(refusing, other);
  const seen: string[] = [];
  refusing.script((req) => {
    seen.push(req.headers['x-api-key'] ?? '');
    // Long enough for the operator's disable to land before the answer.
    return { delayMs: 2000, error: { status: 401, message: 'invalid x-api-key' } };
  });
  const create = async (url: string, name: string, keys: string[], priority: number) => {
    const r = await node.api('POST', '/api/channel/', { name, type: 'anthropic', base_url: url, key: keys[0], keys: keys.slice(1), models: [model], priority, timeout_ms: 5000 });
    expect(r.status).toBe(200);
    return r.body.data.id as number;
  };
  const id = await create(refusing.url, 'inflight-a', ['sk-inflight-key-0001', 'sk-inflight-key-0002', 'sk-inflight-key-0003'], 10);
  await create(other.url, 'inflight-b', ['sk-inflight-key-0009'], 0);
  const u = await keyedUser(gw);

  const pending = send(node, u.key, msg(model));
  for (let i = 0; i < 200 && seen.length === 0; i++) await Bun.sleep(10);
  expect(seen.length).toBe(1);
  expect((await node.api('PUT', '/api/channel/', { id, status: 2 })).status).toBe(200);
  const r = await pending;
  // Any stray probe or key attempt would have landed by now.
  await Bun.sleep(300);

  expect(r.status).toBe(200);
  expect(other.count).toBe(1);
  expect(seen.length).toBe(1);
  const keys = (await node.api('GET', `/api/channel/${id}/keys`)).body.data as Array<{ status: number }>;
  expect(keys.map((k) => k.status)).toEqual([1, 1, 1]);
  expect((await node.api('GET', `/api/channel/${id}`)).body.data.status).toBe(2);
}, 20_000);
