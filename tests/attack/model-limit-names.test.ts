/**
 * Attack on per-model limits with model-name tricks, over real HTTP: inherited property names as
 * patterns and as models, a different case, and count_tokens. What must hold: a pattern named
 * `constructor` survives storage as a real limit; a model named like an Object member
 * matches nothing inherited; a case variant is not another way to the same upstream model; count_tokens
 * counts against the model's request limit. (A channel's mapping alias is matched by its requested name:
 * see the README text of this branch.)
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { V, addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['claude-x', '__proto__', 'constructor'] });
  for (const m of ['claude-x', '__proto__', 'constructor']) await setPrice(gw, m);
}, 30_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 30_000);

test('a pattern named constructor is stored as an own key and enforced; __proto__ and toString as models inherit no limit', async () => {
  const u = await keyedUser(gw, 1e9);
  const set = await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: { constructor: { rate_limit_rpm: 1 } } }, u.token);
  expect(set.status).toBe(200);
  expect(Object.keys(set.body.data.model_limits)).toEqual(['constructor']);
  const view = await gw.api('GET', `/api/token/${u.keyId}`, undefined, u.token);
  expect(Object.keys(view.body.data.model_limits)).toEqual(['constructor']);
  await clearOfWindowEdge();
  expect((await send(gw, u.key, msg('constructor'))).status).toBe(200);
  const r = await send(gw, u.key, msg('constructor'));
  expect([r.status, r.body.error.code]).toEqual([429, 'key_model_rpm_exceeded']);
  for (let i = 0; i < 3; i++) expect((await send(gw, u.key, msg('__proto__'))).status).toBe(200);
  // Not limited (no pattern of that name), and not served: 404 every time, never a 5xx.
  for (let i = 0; i < 3; i++) expect((await send(gw, u.key, msg('toString'))).status).toBe(404);
}, 30_000);

test('a case variant of a limited model is not served (no second door to the same upstream model)', async () => {
  const u = await keyedUser(gw, 1e9);
  await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: { 'claude-*': { rate_limit_rpm: 1 } } }, u.token);
  expect((await send(gw, u.key, msg('claude-x'))).status).toBe(200);
  for (const m of ['CLAUDE-X', 'Claude-x', ' claude-x', 'claude-x ']) {
    const r = await send(gw, u.key, msg(m));
    expect([m, r.status]).not.toEqual([m, 200]);
  }
  expect(up.hits).toBeGreaterThan(0);
}, 30_000);

test('count_tokens counts against the per-model request limit', async () => {
  const u = await keyedUser(gw, 1e9);
  await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: { 'claude-*': { rate_limit_rpm: 2 } } }, u.token);
  await clearOfWindowEdge();
  const count = () => fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': u.key, ...V }, body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'hi' }] }) });
  expect((await count()).status).toBe(200);
  expect((await count()).status).toBe(200);
  expect((await send(gw, u.key, msg('claude-x'))).status).toBe(429);
}, 30_000);

test('a channel alias is no way around a limit on the model it maps to (the mapped name is matched too)', async () => {
  const aliasUp = upstream('anthropic');
  try {
    await addChannel(gw, { type: 'anthropic', url: aliasUp.url, models: ['fast'], mapping: { fast: 'opus-9' }, name: 'alias' });
    await setPrice(gw, 'fast');
    const u = await keyedUser(gw, 1e9);
    await gw.api('PUT', '/api/token/', { id: u.keyId, model_limits: { 'opus-*': { rate_limit_rpm: 1 } } }, u.token);
    await clearOfWindowEdge(10_000);
    expect((await send(gw, u.key, msg('fast'))).status).toBe(200);
    const r = await send(gw, u.key, msg('fast'));
    expect([r.status, r.body.error?.code]).toEqual([429, 'key_model_rpm_exceeded']);
    // An exact pattern on the requested name is the most specific and applies instead.
    const v = await keyedUser(gw, 1e9);
    await gw.api('PUT', '/api/token/', { id: v.keyId, model_limits: { 'opus-*': { rate_limit_rpm: 1 }, fast: { rate_limit_rpm: 3 } } }, v.token);
    for (let i = 0; i < 3; i++) expect((await send(gw, v.key, msg('fast'))).status).toBe(200);
    expect((await send(gw, v.key, msg('fast'))).status).toBe(429);
  } finally {
    await aliasUp.stop();
  }
}, 30_000);
