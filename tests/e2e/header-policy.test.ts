/**
 * Per-channel header and beta policy, observed on recording upstream doubles: which client headers reach
 * the upstream, how anthropic-beta is stripped or rewritten, and that service_tier / speed are removed
 * unless the channel allows them. Bad policies are 400s naming the field.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let ant: Scripted;
let oai: Scripted;
let user: Awaited<ReturnType<typeof keyedUser>>;
const ids: Record<string, number> = {};

const CLIENT = {
  'vendor-version': '2023-06-01', 'anthropic-beta': 'beta-a,beta-b', 'user-agent': 'claude-cli/9.9 (external, cli)', 'x-app': 'cli',
  'x-claude-code-session-id': 'sess-1',
};
// Each raises Anthropic's price: the priority tier, fast mode (Opus), US-only inference (1.1× on Opus 4.6 and later).
const BODY = (model: string) => ({ model, max_tokens: 20, service_tier: 'priority', speed: 'fast', inference_geo: 'us', messages: [{ role: 'user', content: 'Hi' }] });

async function channel(name: string, type: 'anthropic' | 'openai', url: string, policy?: unknown) {
  ids[name] = await addChannel(gw, { type, url, models: [name], name });
  if (policy !== undefined) {
    const r = await gw.api('PUT', '/api/channel/', { id: ids[name], header_policy: policy });
    expect(r.status).toBe(200);
  }
  await setPrice(gw, name);
}

beforeAll(async () => {
  gw = await startGateway();
  ant = upstream('anthropic');
  oai = upstream('openai');
  user = await keyedUser(gw, 100_000_000);
  await channel('native-default', 'anthropic', ant.url);
  await channel('native-open', 'anthropic', ant.url, {
    forward_headers: ['User-Agent', 'x-app'], beta_strip: ['beta-b'], beta_rewrite: { 'beta-a': 'beta-a-2025' }, allow_service_tier: true,
  });
  await channel('native-nobeta', 'anthropic', ant.url, { beta_strip: ['*'] });
  await channel('oai-fwd', 'openai', oai.url, { forward_headers: ['x-app'] });
});
afterAll(async () => { await ant.stop(); await oai.stop(); await gw.stop(); });

async function seen(up: Scripted, model: string) {
  const r = await send(gw, user.key, BODY(model), CLIENT);
  expect(r.status).toBe(200);
  return up.last();
}

describe('what the upstream receives', () => {
  test('default: anthropic-beta forwarded as sent; no other client header; service_tier and speed removed', async () => {
    const req = await seen(ant, 'native-default');
    expect(req.headers['anthropic-beta']).toBe('beta-a,beta-b');
    expect(req.headers['x-app']).toBeUndefined();
    expect(req.headers['x-claude-code-session-id']).toBeUndefined();
    expect(req.headers['user-agent']).not.toBe(CLIENT['user-agent']);
    expect(req.body.service_tier).toBeUndefined();
    expect(req.body.speed).toBeUndefined();
    expect(req.body.inference_geo).toBeUndefined();
    expect(req.body.max_tokens).toBe(20);
  });

  test('a policy forwards its allow-list, strips and rewrites betas, and lets service_tier and speed through', async () => {
    const req = await seen(ant, 'native-open');
    expect(req.headers['anthropic-beta']).toBe('beta-a-2025');
    expect(req.headers['user-agent']).toBe(CLIENT['user-agent']);
    expect(req.headers['x-app']).toBe('cli');
    expect(req.headers['x-api-key']).toBe('upstream-key'); // never the client's credential
    expect(req.body).toMatchObject({ service_tier: 'priority', speed: 'fast', inference_geo: 'us' });
  });

  test('"*" drops anthropic-beta', async () => {
    expect((await seen(ant, 'native-nobeta')).headers['anthropic-beta']).toBeUndefined();
  });

  test('OpenAI channels never get anthropic-beta, but do get their allow-list', async () => {
    const req = await seen(oai, 'oai-fwd');
    expect(req.headers['anthropic-beta']).toBeUndefined();
    expect(req.headers['x-app']).toBe('cli');
    expect(req.headers.authorization).toBe('Bearer upstream-key');
    expect(req.body.service_tier).toBeUndefined();
  });

  test('count_tokens goes through the same policy', async () => {
    const r = await fetch(`${gw.url}/v1/messages/count_tokens`, {
      method: 'POST', headers: { ...CLIENT, 'x-api-key': user.key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'native-open', messages: [{ role: 'user', content: 'Hi' }] }),
    });
    expect(r.status).toBe(200);
    expect(ant.last().path).toBe('/v1/messages/count_tokens');
    expect(ant.last().headers['anthropic-beta']).toBe('beta-a-2025');
    expect(ant.last().headers['x-app']).toBe('cli');
  });
});

describe('the policy on the API', () => {
  test('the view shows every field with its default; PUT replaces the policy', async () => {
    const d = await gw.api('GET', `/api/channel/${ids['native-default']}`);
    expect(d.body.data.header_policy).toEqual({ forward_headers: [], beta_strip: [], beta_rewrite: {}, allow_service_tier: false });
    const o = await gw.api('GET', `/api/channel/${ids['native-open']}`);
    expect(o.body.data.header_policy).toEqual({ forward_headers: ['user-agent', 'x-app'], beta_strip: ['beta-b'], beta_rewrite: { 'beta-a': 'beta-a-2025' }, allow_service_tier: true });
    const id = await addChannel(gw, { type: 'anthropic', url: ant.url, models: ['tmp'], name: 'tmp' });
    await gw.api('PUT', '/api/channel/', { id, header_policy: { forward_headers: ['x-app'] } });
    const r = await gw.api('PUT', '/api/channel/', { id, header_policy: { allow_service_tier: true } });
    expect(r.body.data.header_policy).toEqual({ forward_headers: [], beta_strip: [], beta_rewrite: {}, allow_service_tier: true });
  });

  test('bad policies are 400 invalid_value naming the field, and change nothing', async () => {
    const id = ids['native-default'];
    const cases: Array<[unknown, string]> = [
      [{ forward_headers: ['authorization'] }, 'header_policy.forward_headers[0]'],
      [{ forward_headers: ['x-ok', 'anthropic-version'] }, 'header_policy.forward_headers[1]'],
      [{ forward_headers: ['bad header'] }, 'header_policy.forward_headers[0]'],
      [{ beta_strip: ['not a beta'] }, 'header_policy.beta_strip[0]'],
      [{ beta_rewrite: { 'beta-a': 'x y' } }, 'header_policy.beta_rewrite.beta-a'],
    ];
    for (const [policy, param] of cases) {
      const r = await gw.api('PUT', '/api/channel/', { id, header_policy: policy });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe(param);
    }
    const typed = await gw.api('PUT', '/api/channel/', { id, header_policy: { allow_service_tier: 'yes' } });
    expect(typed.status).toBe(400);
    expect(typed.body.error.param).toStartWith('header_policy');
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.header_policy.forward_headers).toEqual([]);
  });
});
