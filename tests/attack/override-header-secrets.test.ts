/**
 * A channel's credential headers are scrubbed from upstream error text shown to clients and admins, also for a
 * model whose header override removed or replaced them. The scrubber knew only the headers sent for the request,
 * so for that model an upstream echoing the channel's secret (a shared account's debug text, a proxy listing what
 * it knows) handed it in clear to the client, and to an admin running the channel test.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, send, setPrice } from '../e2e/relay-setup';

const TOKEN = 'hdrTokenSecret77aa99bb11';
const TENANT = 'Tn9f3KqZ81mwx0PLr4Vb2cYh';
let gw: TestGateway;
let up: UpstreamDouble;
let id: number;
beforeAll(async () => {
  gw = await startGateway({});
  up = startAnthropicUpstream({});
  up.script(() => ({ error: { status: 400, message: `bad request; account headers: ${TOKEN} ${TENANT} ${Buffer.from(`u:${TOKEN}`).toString('base64')}` } }));
  const made = await gw.api('POST', '/api/channel/', {
    name: 'ovsec', type: 'anthropic', base_url: up.url, key: 'channelkeysecret123456', models: ['ov-removed', 'ov-replaced', 'ov-plain'], timeout_ms: 5000,
    headers: { 'x-auth-token': TOKEN, 'x-tenant': TENANT },
    overrides: [
      { op: 'remove_header', name: 'x-auth-token', models: ['ov-removed'] },
      { op: 'set_header', name: 'x-tenant', value: 'blue', models: ['ov-replaced'] },
    ],
  });
  expect(made.status).toBe(200);
  id = made.body.data.id;
  for (const m of ['ov-removed', 'ov-replaced', 'ov-plain']) await setPrice(gw, m);
});
afterAll(async () => { await up.stop(); await gw.stop(); });

function noSecret(text: string) {
  for (const s of [TOKEN, TENANT]) expect(text).not.toContain(s.slice(0, 10));
  expect(text).not.toContain(Buffer.from(`u:${TOKEN}`).toString('base64').slice(4, 16));
}

test('the relay scrubs the channel header secrets from a model whose override removed or replaced them', async () => {
  const u = await keyedUser(gw);
  for (const model of ['ov-removed', 'ov-replaced', 'ov-plain']) {
    for (const stream of [false, true]) {
      const r = await send(gw, u.key, { model, max_tokens: 20, stream, messages: [{ role: 'user', content: 'Hi' }] });
      expect({ model, stream, status: r.status }).toEqual({ model, stream, status: 400 });
      expect(r.text).toContain('bad request; account headers:');
      noSecret(r.text);
    }
  }
  // The override did what it says: the removed header was not sent, the replaced one was sent as set.
  const sent = up.requests.filter((q) => q.body?.model === 'ov-removed' || q.body?.model === 'ov-replaced');
  expect(sent.some((q) => q.body.model === 'ov-removed' && q.headers['x-auth-token'] === undefined)).toBe(true);
  expect(sent.some((q) => q.body.model === 'ov-replaced' && q.headers['x-tenant'] === 'blue')).toBe(true);
}, 20_000);

test("the channel test scrubs them too, for the model it probes", async () => {
  for (const model of ['ov-removed', 'ov-replaced']) {
    const r = await gw.api('POST', `/api/channel/${id}/test?model=${model}`);
    expect(r.status).toBe(200);
    expect([r.body.data.success, r.body.data.status]).toEqual([false, 400]);
    expect(r.body.data.message).toContain('bad request; account headers:');
    noSecret(r.body.data.message);
  }
}, 20_000);
