/**
 * A model literally named like an Object.prototype member (`constructor`, `toString`, `valueOf`). The channel's
 * `model_mapping` lookup found the inherited member for it: the upstream was sent a function as the model (dropped
 * by JSON.stringify, so a body with no `model` at all). Mapped names must come only from the mapping's own entries. Real gateway, upstream double over HTTP.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, msg, send, setPrice } from '../e2e/relay-setup';

let gw: TestGateway;
let up: UpstreamDouble;
beforeAll(async () => {
  gw = await startGateway({});
  up = startAnthropicUpstream({ maxRecorded: 100 });
});
afterAll(async () => { await up.stop(); await gw.stop(); });

test('a model named constructor, toString or valueOf reaches the upstream under its own name (or its mapping)', async () => {
  const names = ['constructor', 'toString', 'valueOf'];
  for (const m of [...names, 'mapped-model']) await setPrice(gw, m);
  const made = await gw.api('POST', '/api/channel/', {
    name: 'proto', type: 'anthropic', base_url: up.url, key: 'sk-proto-key-00000001', models: [...names, 'mapped-model'],
    model_mapping: { 'mapped-model': 'upstream-model', toString: 'upstream-tostring' },
  });
  expect(made.status).toBe(200);
  const u = await keyedUser(gw);
  const sent: Array<string | undefined> = [];
  for (const m of [...names, 'mapped-model']) {
    const r = await send(gw, u.key, msg(m));
    expect(r.status).toBe(200);
    sent.push(up.requests.at(-1)?.body?.model);
  }
  expect(sent).toEqual(['constructor', 'upstream-tostring', 'valueOf', 'upstream-model']);
  // The channel test takes the same lookup.
  const t = await gw.api('POST', `/api/channel/${made.body.data.id}/test?model=valueOf`);
  expect(t.body.data.success).toBe(true);
  expect(up.requests.at(-1)?.body?.model).toBe('valueOf');
});
