/**
 * The channel test (POST /api/channel/:id/test) and the channel's keys and the upstream cap. The test used the
 * channel's first key when none was enabled, so it sent a key an operator had disabled (the route names no key,
 * so the operator never chose it); it now uses only enabled keys and answers 409 `no_enabled_channel_key` when
 * there is none. It also took no upstream slot, so an admin looping tests held upstream connections past
 * MAX_UPSTREAM_CONNECTIONS; it now takes one like a relayed request (503 `upstream_capacity` when none is free).
 * Node 1 itself is asked throughout: the slots and the channel snapshot the test reads are per node.
 */
import { afterEach, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

async function setUp(env: Record<string, string> = {}) {
  const up = upstream('anthropic');
  const gw: TestGateway = await startGateway(env);
  cleanup.push(() => gw.stop(), () => up.stop());
  return { gw, up };
}

async function channel(gw: TestGateway, up: Scripted, model: string, keys: string[]): Promise<number> {
  const r = await gw.nodeApi('POST', '/api/channel/', {
    name: model, type: 'anthropic', base_url: up.url, key: keys[0], keys: keys.slice(1), models: [model], timeout_ms: 10_000,
  });
  expect(r.status).toBe(200);
  return r.body.data.id;
}

/** Waits until node 1's snapshot of the channel shows these key statuses (a change reaches it through the feed). */
async function keysAre(gw: TestGateway, id: number, statuses: number[]) {
  for (let i = 0; i < 250; i++) {
    if (JSON.stringify(gw.services.channelRegistry.get(id)?.keys.map((k) => k.status)) === JSON.stringify(statuses)) return;
    await Bun.sleep(20);
  }
  expect(gw.services.channelRegistry.get(id)?.keys.map((k) => k.status)).toEqual(statuses);
}

describe('the channel test uses only enabled keys', () => {
  test('every key disabled by the operator: 409 no_enabled_channel_key, and nothing is sent upstream', async () => {
    const { gw, up } = await setUp();
    const id = await channel(gw, up, 'test-keys-none', ['sk-test-only-disabled-1111']);
    expect((await gw.nodeApi('POST', `/api/channel/${id}/keys/1/disable`)).status).toBe(200);
    await keysAre(gw, id, [2]);
    const r = await gw.nodeApi('POST', `/api/channel/${id}/test`);
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('no_enabled_channel_key');
    expect(JSON.stringify(r.body)).not.toContain('sk-test-only');
    expect(up.hits).toBe(0);
  }, 20_000);

  test('the first key disabled by the operator: the test is sent with the enabled one', async () => {
    const { gw, up } = await setUp();
    const id = await channel(gw, up, 'test-keys-second', ['sk-test-first-aaaa', 'sk-test-second-bbbb']);
    expect((await gw.nodeApi('POST', `/api/channel/${id}/keys/1/disable`)).status).toBe(200);
    await keysAre(gw, id, [2, 1]);
    const r = await gw.nodeApi('POST', `/api/channel/${id}/test`);
    expect(r.status).toBe(200);
    expect(r.body.data.success).toBe(true);
    expect(up.hits).toBe(1);
    expect(up.last().headers['x-api-key']).toBe('sk-test-second-bbbb');
  }, 20_000);
});

describe('the channel test takes an upstream slot', () => {
  test('MAX_UPSTREAM_CONNECTIONS=1 held by a test: another test and a relayed request get 503 upstream_capacity, and the slot comes back', async () => {
    const { gw, up } = await setUp({ MAX_UPSTREAM_CONNECTIONS: '1', RELAY_MAX_ATTEMPTS: '1' });
    const model = 'test-slot';
    const id = await channel(gw, up, model, ['sk-test-slot-1111']);
    await setPrice(gw, model);
    const u = await keyedUser(gw);
    // The first test's upstream answers after 3 s: its slot is held meanwhile.
    up.queue.push({ delayMs: 3_000 });
    const first = gw.nodeApi('POST', `/api/channel/${id}/test`);
    for (let i = 0; i < 250 && up.hits === 0; i++) await Bun.sleep(20);
    expect(up.hits).toBe(1);
    expect(gw.services.relay.slots.inUse).toBe(1);
    const second = await gw.nodeApi('POST', `/api/channel/${id}/test`);
    expect(second.status).toBe(503);
    expect(second.body.error.code).toBe('upstream_capacity');
    const relayed = await send(nodeOne(gw), u.key, msg(model));
    expect(relayed.status).toBe(503);
    expect(up.hits).toBe(1);
    const done = await first;
    expect(done.status).toBe(200);
    expect(done.body.data.success).toBe(true);
    expect(gw.services.relay.slots.inUse).toBe(0);
    // Released: the next test and request go through.
    expect((await gw.nodeApi('POST', `/api/channel/${id}/test`)).body.data.success).toBe(true);
    expect((await send(nodeOne(gw), u.key, msg(model))).status).toBe(200);
  }, 20_000);
});
