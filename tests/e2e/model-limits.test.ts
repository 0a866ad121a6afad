/**
 * Per-model limits on keys, users and groups (`model_limits`), over real HTTP: validation, views,
 * 429 with retry-after naming the model limit, and other models untouched.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;

beforeAll(async () => {
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['opus-a', 'opus-b', 'haiku'], group: 'default,ml-group' });
  for (const m of ['opus-a', 'opus-b', 'haiku']) await setPrice(gw, m, { input: 1, output: 1 });
});
afterAll(async () => {
  await up.stop();
  await gw.stop();
});

describe('model_limits', () => {
  test('bad patterns, unknown fields, bad values and too many entries are 400 naming the field', async () => {
    const u = await keyedUser(gw);
    const bad = async (model_limits: unknown) => gw.api('PUT', '/api/token/', { id: u.keyId, model_limits }, u.token);
    for (const ml of [{ 'a*b': { rate_limit_rpm: 1 } }, { 'a b': { rate_limit_rpm: 1 } }, { x: { rpm: 1 } }, { x: { rate_limit_rpm: -1 } }, { x: { rate_limit_rpm: 1.5 } }, [1],
      Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`m${i}`, { rate_limit_rpm: 1 }]))]) {
      const r = await bad(ml);
      expect([JSON.stringify(ml).slice(0, 40), r.status]).toEqual([JSON.stringify(ml).slice(0, 40), 400]);
      expect(r.body.error.param).toStartWith('model_limits');
    }
  });

  test('a key model limit gives 429 with retry-after on its models only; views show it and null clears it', async () => {
    const u = await keyedUser(gw);
    const set = await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: { 'opus-*': { rate_limit_rpm: 2 } } }, u.token);
    expect(set.status).toBe(200);
    expect(set.body.data.model_limits).toEqual({ 'opus-*': { rate_limit_rpm: 2, rate_limit_tpm: 0, max_concurrency: 0 } });
    await clearOfWindowEdge();
    expect((await send(gw, u.key, msg('opus-a'))).status).toBe(200);
    expect((await send(gw, u.key, msg('opus-b'))).status).toBe(200);
    const r = await send(gw, u.key, msg('opus-a'));
    expect(r.status).toBe(429);
    expect(r.body.error).toMatchObject({ type: 'rate_limit_error', code: 'key_model_rpm_exceeded', param: 'model' });
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await send(gw, u.key, msg('haiku'))).status).toBe(200);
    const cleared = await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: null }, u.token);
    expect(cleared.body.data.model_limits).toBeNull();
    expect((await send(gw, u.key, msg('opus-a'))).status).toBe(200);
  }, 30_000);

  test('user and group model limits (concurrency, exact name) over HTTP', async () => {
    const g = await gw.api('POST', '/api/group/', { name: 'ml-group', model_limits: { haiku: { rate_limit_rpm: 1 } } });
    expect(g.status).toBe(200);
    expect(g.body.data.model_limits.haiku.rate_limit_rpm).toBe(1);
    const u = await keyedUser(gw);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, group: 'ml-group', model_limits: { 'opus-*': { max_concurrency: 1 } } })).status).toBe(200);
    const user = await gw.api('GET', `/api/user/${u.id}`);
    expect(user.body.data.model_limits['opus-*'].max_concurrency).toBe(1);
    await clearOfWindowEdge();
    // The second request is sent once the first holds its slot (the upstream has it), and while the upstream keeps
    // it: a fixed 100 ms head start within a 300 ms answer could let a loaded 3-node run admit them the other way
    // round, or the first end before the second came.
    const hits = up.hits;
    up.queue.push({ text: 'slow', delayMs: 2000 });
    const slow = send(gw, u.key, msg('opus-a'));
    while (up.hits === hits) await Bun.sleep(10);
    const busy = await send(gw, u.key, msg('opus-b'));
    expect([busy.status, busy.body.error.code]).toEqual([429, 'user_model_concurrency_exceeded']);
    expect((await slow).status).toBe(200);
    expect((await send(gw, u.key, msg('opus-b'))).status).toBe(200);
    expect((await send(gw, u.key, msg('haiku'))).status).toBe(200);
    const second = await send(gw, u.key, msg('haiku'));
    expect([second.status, second.body.error.code]).toEqual([429, 'group_model_rpm_exceeded']);
  }, 30_000);
});
