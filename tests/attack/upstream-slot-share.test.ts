/**
 * Attack: one user opens streams until the gateway-wide MAX_UPSTREAM_CONNECTIONS is used up, so every
 * other user gets 503 overloaded_error. Without a share (the default) that is what happens, and the
 * test pins it; with MAX_UPSTREAM_CONNECTIONS_PER_USER the hog gets 429 at its share and others are served.
 * Slots taken and refused on the share path come back (no leak).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { V, addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

async function setup(env: Record<string, string>) {
  const gw = await startGateway({ MAX_UPSTREAM_CONNECTIONS: '4', RELAY_HEALTH_FAILURES: '1000', ...env });
  const up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['share-model'] });
  await setPrice(gw, 'share-model');
  return { gw, up };
}

/** A stream the upstream keeps open; resolves once its first bytes arrived (or with the refusal). */
async function hold(gw: TestGateway, up: Scripted, key: string): Promise<{ status: number; code?: string; ctrl: AbortController }> {
  up.queue.push({ text: 'held open', pause: { afterFrames: 2, ms: 30_000 } }); // silent after its first content event: the stream is committed
  const ctrl = new AbortController();
  const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, ...V }, body: JSON.stringify(msg('share-model', { stream: true })), signal: ctrl.signal });
  if (res.status !== 200) {
    up.queue.pop();
    return { status: res.status, code: (await res.json() as any).error?.code, ctrl };
  }
  const reader = res.body!.getReader();
  await reader.read();
  reader.read().catch(() => {});
  return { status: 200, ctrl };
}

async function slotsBecome(gw: TestGateway, n: number) {
  const end = Date.now() + 3000;
  while (gw.services.relay.slots.inUse !== n && Date.now() < end) await Bun.sleep(10);
  expect(gw.services.relay.slots.inUse).toBe(n);
}

describe('without a per-user share (default)', () => {
  let gw: TestGateway;
  let up: Scripted;
  beforeAll(async () => ({ gw, up } = await setup({})), 30_000);
  afterAll(async () => { await gw.stop(); await up.stop(); }, 30_000);

  test('one user can take every slot and the next user gets 503 (documented; set MAX_UPSTREAM_CONNECTIONS_PER_USER)', async () => {
    const hog = await keyedUser(gw, 1e9);
    const other = await keyedUser(gw, 1e9);
    const held = await Promise.all(Array.from({ length: 4 }, () => hold(gw, up, hog.key)));
    expect(held.map((h) => h.status)).toEqual([200, 200, 200, 200]);
    const r = await send(gw, other.key, msg('share-model'));
    expect([r.status, r.body.error.code]).toEqual([503, 'upstream_capacity']);
    for (const h of held) h.ctrl.abort();
    await slotsBecome(gw, 0);
  }, 30_000);
});

describe('MAX_UPSTREAM_CONNECTIONS_PER_USER', () => {
  let gw: TestGateway;
  let up: Scripted;
  beforeAll(async () => ({ gw, up } = await setup({ MAX_UPSTREAM_CONNECTIONS_PER_USER: '2' })), 30_000);
  afterAll(async () => { await gw.stop(); await up.stop(); }, 30_000);

  test('the hog gets 429 past its share (all its keys together); another user is still served; nothing leaks', async () => {
    const hog = await keyedUser(gw, 1e9);
    const second = await gw.api('POST', '/api/token/', { name: 'k2' }, hog.token);
    const other = await keyedUser(gw, 1e9);
    const a = await hold(gw, up, hog.key);
    const b = await hold(gw, up, second.body.data.key);
    expect([a.status, b.status]).toEqual([200, 200]);
    const hits = up.hits;
    const refused = await send(gw, hog.key, msg('share-model'));
    expect([refused.status, refused.body.error.type, refused.body.error.code]).toEqual([429, 'rate_limit_error', 'user_upstream_share_exceeded']);
    expect(refused.headers.get('retry-after')).toBe('1');
    const count = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': hog.key, ...V }, body: JSON.stringify({ model: 'share-model', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(count.status).toBe(429);
    expect(up.hits).toBe(hits);
    await slotsBecome(gw, 2);
    expect((await send(gw, other.key, msg('share-model'))).status).toBe(200);
    a.ctrl.abort();
    await slotsBecome(gw, 1);
    expect((await send(gw, hog.key, msg('share-model'))).status).toBe(200);
    b.ctrl.abort();
    await slotsBecome(gw, 0);
  }, 30_000);
});
