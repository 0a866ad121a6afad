/**
 * An attacker's pass over routing, over real HTTP against the upstream doubles: model allow-lists against
 * name variants, the priority/weight rule measured over 2,000 requests, failover limits (client errors are
 * not retried, RELAY_MAX_ATTEMPTS caps the channels tried, failed attempts bill nothing) and hostile upstreams.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, V, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
const up = () => { const u = upstream('anthropic'); ups.push(u); return u; };
beforeAll(async () => {
  // The prober must not add requests of its own: counts of upstream hits are exact.
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '1000', RELAY_PROBE_INTERVAL_MS: '3600000', RELAY_MAX_ATTEMPTS: '3' });
});
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

/** What the user was charged: the ledger's sum (SQLite: after the batched settlement is written). */
const spent = async (id: number, seeded = 1_000_000) => { gw.services.relay.quota.flush?.(); return seeded - (await gw.services.ledger.sum(id)); };

const post = (path: string, key: string, body: unknown) =>
  fetch(`${gw.url}${path}`, { method: 'POST', headers: { ...V, 'content-type': 'application/json', 'x-api-key': key }, body: JSON.stringify(body) });

describe('model allow-lists', () => {
  test('case variants, trailing spaces, look-alikes and the dear model are refused before any upstream call', async () => {
    const cheap = up(), dear = up();
    await setPrice(gw, 'al-cheap');
    await setPrice(gw, 'al-dear', { input: 50_000_000, output: 90_000_000 });
    await addChannel(gw, { type: 'anthropic', url: cheap.url, models: ['al-cheap'] });
    await addChannel(gw, { type: 'anthropic', url: dear.url, models: ['al-dear'] });
    const u = await keyedUser(gw, 10_000_000, { models: ['al-cheap'] });
    // Cyrillic "а" and "е", a zero-width space, a fullwidth hyphen, a trailing space and newline, another case.
    for (const model of ['AL-CHEAP', 'Al-Cheap', 'al-cheap ', 'al-cheap\n', ' al-cheap', 'аl-cheap', 'al-chеap', 'al\u200b-cheap', 'al\uff0dcheap', 'al-dear']) {
      const r = await send(gw, u.key, msg(model));
      expect({ model, status: r.status, code: r.body?.error?.code }).toEqual({ model, status: 403, code: 'model_not_allowed' });
      const c = await post('/v1/messages/count_tokens', u.key, { model, messages: [{ role: 'user', content: 'Hi' }] });
      expect({ model, status: c.status }).toEqual({ model, status: 403 });
    }
    expect(dear.hits).toBe(0);
    expect(cheap.hits).toBe(0);
    // The listing shows only what the key may use; the dear model is as unknown to it as a name nobody serves.
    const list = await (await fetch(`${gw.url}/v1/models?limit=1000`, { headers: { 'x-api-key': u.key } })).json() as { data: Array<{ id: string }> };
    expect(list.data.map((m) => m.id)).toEqual(['al-cheap']);
    expect((await fetch(`${gw.url}/v1/models/al-dear`, { headers: { 'x-api-key': u.key } })).status).toBe(404);
    // The allowed name itself works.
    expect((await send(gw, u.key, msg('al-cheap'))).status).toBe(200);
    expect(cheap.hits).toBe(1);
  });

  test('a name variant a key may use but no channel serves is 404, never routed to a channel of a similar name', async () => {
    const ch = up();
    await setPrice(gw, 'cv-model');
    await addChannel(gw, { type: 'anthropic', url: ch.url, models: ['cv-model'] });
    const u = await keyedUser(gw);
    for (const model of ['CV-MODEL', 'cv-model ', 'сv-model', 'cv-model\u200b']) {
      const r = await send(gw, u.key, msg(model));
      expect({ model, status: r.status, code: r.body?.error?.code }).toEqual({ model, status: 404, code: 'model_not_found' });
    }
    expect(ch.hits).toBe(0);
  });

  test('a channel of another group is never used, whatever the model name', async () => {
    const priv = up();
    await setPrice(gw, 'grp-private');
    await addChannel(gw, { type: 'anthropic', url: priv.url, models: ['grp-private'], group: 'vip' });
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('grp-private'));
    expect(r.status).toBe(404);
    const c = await post('/v1/messages/count_tokens', u.key, { model: 'grp-private', messages: [{ role: 'user', content: 'Hi' }] });
    expect(c.status).toBe(404);
    expect(priv.hits).toBe(0);
  });
  test('count_tokens tells a down model from an unknown one as /v1/messages does: a disabled channel\'s model is estimated, not 404', async () => {
    const ch = up();
    await setPrice(gw, 'ct-down');
    const id = await addChannel(gw, { type: 'anthropic', url: ch.url, models: ['ct-down'] });
    expect((await nodeOne(gw).api('PUT', '/api/channel/', { id, status: 2 })).status).toBe(200);
    const u = await keyedUser(gw);
    expect((await send(gw, u.key, msg('ct-down'))).status).toBe(503);
    const c = await post('/v1/messages/count_tokens', u.key, { model: 'ct-down', messages: [{ role: 'user', content: 'Hi there' }] });
    expect(c.status).toBe(200);
    expect(((await c.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
    // A name nobody serves stays 404 on both.
    expect((await post('/v1/messages/count_tokens', u.key, { model: 'ct-nobody', messages: [{ role: 'user', content: 'Hi' }] })).status).toBe(404);
    expect(ch.hits).toBe(0);
  });
});

describe('priority and weight over 2,000 requests', () => {
  test('the top priority tier only, split by weight; a disabled channel is never used', async () => {
    const [a, b, off, low] = [up(), up(), up(), up()];
    await setPrice(gw, 'pw');
    await addChannel(gw, { type: 'anthropic', url: a.url, models: ['pw'], priority: 5, weight: 3 });
    await addChannel(gw, { type: 'anthropic', url: b.url, models: ['pw'], priority: 5, weight: 1 });
    // Weight 0 is refused when the channel is written (400 out_of_range), so it never reaches routing.
    const zero = await gw.api('POST', '/api/channel/', { name: 'w0', type: 'anthropic', base_url: off.url, key: 'k-w0-000000', models: ['pw'], weight: 0 });
    expect(zero.status).toBe(400);
    const offId = await addChannel(gw, { type: 'anthropic', url: off.url, models: ['pw'], priority: 5, weight: 1000 });
    expect((await gw.api('PUT', '/api/channel/', { id: offId, status: 2 })).status).toBe(200);
    await addChannel(gw, { type: 'anthropic', url: low.url, models: ['pw'], priority: 4, weight: 1000 });
    const u = await keyedUser(gw, 1_000_000_000);
    const N = 2000;
    // The weighted draw is per node: all to node 1.
    for (let i = 0; i < N; i += 50) {
      const rs = await Promise.all(Array.from({ length: 50 }, () => send(nodeOne(gw), u.key, msg('pw'))));
      for (const r of rs) expect(r.status).toBe(200);
    }
    expect(off.hits).toBe(0);
    expect(low.hits).toBe(0);
    expect(a.hits + b.hits).toBe(N);
    // Expected 1,500 for weight 3 of 4; σ = √(2000·0.75·0.25) ≈ 19.4: ±100 is over 5 σ.
    expect(Math.abs(a.hits - 1500)).toBeLessThan(100);
  }, 60_000);
});

describe('failover limits', () => {
  test('an upstream 400 invalid_request is the client\'s answer: not retried elsewhere, no health count, nothing billed', async () => {
    const first = up(), second = up();
    await setPrice(gw, 'fo-400');
    const id = await addChannel(gw, { type: 'anthropic', url: first.url, models: ['fo-400'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: second.url, models: ['fo-400'], priority: 1 });
    first.fallback = { error: { status: 400, message: 'messages: roles must alternate' } };
    const u = await keyedUser(gw);
    for (let i = 0; i < 5; i++) {
      const r = await send(nodeOne(gw), u.key, msg('fo-400'));
      expect(r.status).toBe(400);
      expect(r.body.error.message).toContain('roles must alternate');
    }
    expect(first.hits).toBe(5);
    expect(second.hits).toBe(0);
    expect(gw.services.relay.health.recentFailures(id)).toBe(0);
    expect(await spent(u.id)).toBe(0);
  });

  test('RELAY_MAX_ATTEMPTS caps the channels one request tries; failed attempts bill nothing', async () => {
    const all = [up(), up(), up(), up(), up()];
    await setPrice(gw, 'fo-cap');
    for (const [i, s] of all.entries()) {
      s.fallback = { error: { status: 500 } };
      await addChannel(gw, { type: 'anthropic', url: s.url, models: ['fo-cap'], priority: 10 - i });
    }
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('fo-cap'));
    expect(r.status).toBeGreaterThanOrEqual(500);
    expect(all.map((s) => s.hits)).toEqual([1, 1, 1, 0, 0]);
    expect(await spent(u.id)).toBe(0);
  });

  test('only the answered attempt is billed, once', async () => {
    const bad = up(), good = up();
    await setPrice(gw, 'fo-once');
    await addChannel(gw, { type: 'anthropic', url: bad.url, models: ['fo-once'], priority: 2 });
    await addChannel(gw, { type: 'anthropic', url: good.url, models: ['fo-once'], priority: 1 });
    bad.fallback = { error: { status: 529, message: 'overloaded' } };
    good.fallback = { text: 'ok', usage: { input: 10, output: 5 } };
    const u = await keyedUser(gw);
    const r = await send(gw, u.key, msg('fo-once'));
    expect(r.status).toBe(200);
    // 10 input × 1 + 5 output × 2 (units per token at the prices set above).
    expect(await spent(u.id)).toBe(20);
  });
});
