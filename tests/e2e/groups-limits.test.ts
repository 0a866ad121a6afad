/**
 * Groups (price ratio folded into the one rounding, fallbacks) and limits per key, user and group,
 * over real HTTP against a real gateway and upstream doubles.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, upstream, V, type Scripted, balanceOf } from './relay-setup';

let gw: TestGateway;
let up: Scripted;

const logOf = (requestId: string) => gw.db.get('select cost, "group", price_ratio from usage_logs where request_id = ?', requestId);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An Anthropic message body, answered after `ms` (counts requests in flight at the upstream). */
const flight = { now: 0, max: 0 };
const slowReply = (ms: number) => async () => {
  flight.now++;
  flight.max = Math.max(flight.max, flight.now);
  await sleep(ms);
  flight.now--;
  return Response.json({
    id: 'msg_slow', type: 'message', role: 'assistant', model: 'slow-x', content: [{ type: 'text', text: 'ok' }],
    stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 },
  });
};

async function group(body: Record<string, unknown>) {
  const r = await gw.api('POST', '/api/group/', body);
  if (r.status !== 200) throw new Error(`group: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.data;
}

/** A user (set through the admin API) with a key; `user` fields go to PUT /api/user/. */
async function member(user: Record<string, unknown>, key: Record<string, unknown> = {}, balance = 100_000_000) {
  const u = await keyedUser(gw, balance, key);
  const r = await gw.api('PUT', '/api/user/', { id: u.id, ...user });
  if (r.status !== 200) throw new Error(`user: ${r.status} ${JSON.stringify(r.body)}`);
  return u;
}

beforeAll(async () => {
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['claude-x', 'slow-x'], group: 'default,gold,capped' });
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['only-default'], name: 'default-only' });
  // A price that makes double rounding visible: 1000 tokens × 333,333 / 10⁶ = 333.333 units.
  for (const model of ['claude-x', 'slow-x', 'only-default']) {
    const r = await gw.api('PUT', '/api/pricing/', { model, input: 333_333, output: 0, cache_read: 0, cache_write: 0 });
    expect(r.status).toBe(200);
  }
  await group({ name: 'gold', ratio: 1500 });
});
afterAll(async () => {
  await up.stop();
  await gw.stop();
});

describe('group price ratio', () => {
  test('ratio 1500 bills exactly ceil(base × 1.5) with one rounding, under concurrency, and logs group and ratio', async () => {
    const u = await member({ group: 'gold' });
    const before = await balanceOf(gw, u.id);
    up.fallback = { text: 'ok', usage: { input: 1000, output: 0 } };
    const rs = await Promise.all(Array.from({ length: 20 }, () => send(gw, u.key, msg('claude-x'))));
    expect(rs.map((r) => r.status)).toEqual(Array(20).fill(200));
    // ceil(1000 × 333,333 × 1500 / 10⁹) = ceil(499.9995) = 500; rounding twice would give ceil(334 × 1.5) = 501.
    for (const r of rs) expect(await logOf(r.headers.get('request-id')!)).toEqual({ cost: 500, group: 'gold', price_ratio: 1500 });
    expect(before - await balanceOf(gw, u.id)).toBe(20 * 500);
    const listed = await gw.api('GET', `/api/log/self`, undefined, u.token);
    expect(listed.body.data.items[0]).toMatchObject({ cost: 500, group: 'gold', price_ratio: 1500 });
    up.fallback = { text: 'Hello there' };
  });

  test('a key overriding its user group pays that group ratio; an unrecorded group is ×1', async () => {
    const u = await member({ group: 'default' });
    // Only an admin may put a key in another group than its owner's.
    expect((await gw.api('PUT', '/api/token/', { id: u.keyId, group: 'gold' })).status).toBe(200);
    up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
    const r = await send(gw, u.key, msg('claude-x'));
    expect(await logOf(r.headers.get('request-id')!)).toEqual({ cost: 500, group: 'gold', price_ratio: 1500 });
    const plain = await member({ group: 'default' });
    up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
    const p = await send(gw, plain.key, msg('claude-x'));
    expect(await logOf(p.headers.get('request-id')!)).toEqual({ cost: 334, group: 'default', price_ratio: 1000 });
  });
});

describe('a key in its owner\'s group', () => {
  test('follows the owner: moved out of a free group by an admin, the key pays the new group; an admin\'s pin stays', async () => {
    await group({ name: 'promo', ratio: 0, fallbacks: ['default'] });
    const u = await member({ group: 'promo' });
    // The owner's own group, set by the owner: stored as "the owner's" (null), so it cannot outlive a move.
    const own = await gw.api('PUT', '/api/token/', { id: u.keyId, group: 'promo' }, u.token);
    expect(own.status).toBe(200);
    expect(own.body.data.group).toBeNull();
    const made = await gw.api('POST', '/api/token/', { name: 'own', group: 'promo' }, u.token);
    expect(made.body.data.group).toBeNull();
    // A key an admin put in another group than its owner's keeps it whatever happens to the owner.
    const pinned = await gw.api('POST', '/api/token/', { name: 'pinned', user_id: u.id, group: 'gold' });
    expect(pinned.body.data.group).toBe('gold');
    up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
    const free = await send(gw, u.key, msg('claude-x'));
    expect(await logOf(free.headers.get('request-id')!)).toEqual({ cost: 0, group: 'promo', price_ratio: 0 });
    expect((await gw.api('PUT', '/api/user/', { id: u.id, group: 'default' })).status).toBe(200);
    for (const key of [u.key, made.body.data.key]) {
      up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
      const paid = await send(gw, key, msg('claude-x'));
      expect(await logOf(paid.headers.get('request-id')!)).toEqual({ cost: 334, group: 'default', price_ratio: 1000 });
    }
    up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
    const gold = await send(gw, pinned.body.data.key, msg('claude-x'));
    expect(await logOf(gold.headers.get('request-id')!)).toEqual({ cost: 500, group: 'gold', price_ratio: 1500 });
  });
});

describe('group fallbacks', () => {
  test('a group without a channel for the model uses its fallbacks, in order, at its own ratio', async () => {
    const g = await group({ name: 'silver', ratio: 2000 });
    const u = await member({ group: 'silver' });
    const refused = await send(gw, u.key, msg('only-default'));
    expect(refused.status).toBe(404);
    expect(refused.body.error.code).toBe('model_not_found');
    expect((await gw.api('PUT', '/api/group/', { id: g.id, fallbacks: ['nobody', 'default'] })).status).toBe(200);
    up.queue.push({ text: 'ok', usage: { input: 1000, output: 0 } });
    const r = await send(gw, u.key, msg('only-default'));
    expect(r.status).toBe(200);
    expect(await logOf(r.headers.get('request-id')!)).toEqual({ cost: 667, group: 'silver', price_ratio: 2000 });
    // What the fallbacks serve is what the key may use: counted and listed like the group's own models.
    const count = await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...V, 'content-type': 'application/json', 'x-api-key': u.key },
      body: JSON.stringify({ model: 'only-default', messages: [{ role: 'user', content: 'Hi' }] }) });
    expect(count.status).toBe(200);
    const models = await (await fetch(`${gw.url}/v1/models?limit=1000`, { headers: { 'x-api-key': u.key } })).json() as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('only-default');
    expect((await fetch(`${gw.url}/v1/models/only-default`, { headers: { 'x-api-key': u.key } })).status).toBe(200);
  });
});

describe('limits', () => {
  test('a key limit of 30/min lets exactly 30 of 90 concurrent requests through; the rest get 429 key_rpm_exceeded', async () => {
    const u = await member({}, { rate_limit_rpm: 30 });
    await clearOfWindowEdge(10_000);
    const rs = await Promise.all(Array.from({ length: 90 }, () => send(gw, u.key, msg('claude-x'))));
    expect(rs.filter((r) => r.status === 200).length).toBe(30);
    const refused = rs.filter((r) => r.status !== 200);
    expect(refused.length).toBe(60);
    for (const r of refused) {
      expect(r.status).toBe(429);
      expect(r.body.error.code).toBe('key_rpm_exceeded');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    }
  }, 30_000);

  test('a group concurrency limit of 3 never has more than 3 requests in flight at the upstream, and frees its slots', async () => {
    await group({ name: 'capped', max_concurrency: 3 });
    const a = await member({ group: 'capped' });
    const b = await member({ group: 'capped' });
    flight.max = 0;
    up.fallback = { response: slowReply(150) };
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => send(gw, i % 2 ? a.key : b.key, msg('slow-x'))));
    up.fallback = { text: 'Hello there' };
    expect(flight.max).toBeLessThanOrEqual(3);
    expect(rs.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(3);
    for (const r of rs.filter((r) => r.status !== 200)) {
      expect(r.status).toBe(429);
      expect(r.body.error.code).toBe('group_concurrency_exceeded');
      expect(r.headers.get('retry-after')).toBe('1');
    }
    expect((await send(gw, a.key, msg('claude-x'))).status).toBe(200);
  });

  test('a user token-per-minute limit counts max_tokens plus input at admission (user_tpm_exceeded)', async () => {
    const u = await member({ rate_limit_tpm: 150 });
    await clearOfWindowEdge();
    expect((await send(gw, u.key, msg('claude-x', { max_tokens: 100 }))).status).toBe(200);
    const r = await send(gw, u.key, msg('claude-x', { max_tokens: 100 }));
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('user_tpm_exceeded');
  }, 30_000);

  test('a concurrency slot is given back when the client aborts a stream', async () => {
    const u = await member({}, { max_concurrency: 1 });
    up.queue.push({ text: 'word '.repeat(200), chunkDelayMs: 50 });
    const ctrl = new AbortController();
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V },
      body: JSON.stringify(msg('claude-x', { stream: true })),
    });
    expect(res.status).toBe(200);
    await res.body!.getReader().read();
    const busy = await send(gw, u.key, msg('claude-x'));
    expect(busy.status).toBe(429);
    expect(busy.body.error.code).toBe('key_concurrency_exceeded');
    ctrl.abort();
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) {
      await sleep(20);
      status = (await send(gw, u.key, msg('claude-x'))).status;
    }
    expect(status).toBe(200);
  });
});

describe('group administration', () => {
  test('fields are validated (400 with param), names unique (409), unknown ids 404', async () => {
    const bad = async (body: unknown, param: string) => {
      const r = await gw.api('POST', '/api/group/', body);
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe(param);
    };
    await bad({ name: 'x y' }, 'name');
    await bad({ name: 'r', ratio: -1 }, 'ratio');
    await bad({ name: 'r', ratio: 1.5 }, 'ratio');
    await bad({ name: 'r', fallbacks: ['r'] }, 'fallbacks[0]');
    await bad({ name: 'r', max_concurrency: -1 }, 'max_concurrency');
    expect((await gw.api('POST', '/api/group/', { name: 'gold' })).status).toBe(409);
    expect((await gw.api('GET', '/api/group/999')).status).toBe(404);
    const list = await gw.api('GET', '/api/group/');
    expect(list.body.data.find((g: any) => g.name === 'gold')).toMatchObject({ ratio: 1500, fallbacks: [], rate_limit_rpm: 0 });
    const u = await keyedUser(gw);
    expect((await gw.api('GET', '/api/group/', undefined, u.token)).status).toBe(403);
    const k = await gw.api('POST', '/api/token/', { name: 'k', rate_limit_tpm: -5 }, u.token);
    expect(k.status).toBe(400);
    expect(k.body.error.param).toBe('rate_limit_tpm');
  });
});
