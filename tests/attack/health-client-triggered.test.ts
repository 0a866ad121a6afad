/**
 * Attack: a low-privilege user disables a shared channel for everyone by sending requests the upstream
 * itself fails on. Real upstreams do answer 5xx to particular inputs (an OpenAI-compatible server that
 * crashes on an odd tool schema, a model server that 500s on a prompt it cannot tokenize); the gateway
 * counts every 5xx against the channel and fails over, so each such request counts once against EVERY
 * channel of the model: RELAY_HEALTH_FAILURES (3) requests auto-disable them all and every other user
 * gets 503 no_healthy_channel until the prober re-enables them (RELAY_PROBE_INTERVAL_MS), when the
 * attacker can start again. Real gateway, upstream double scripted to 500 on one input only.
 *
 * Fixed: at the threshold the channel's probe (a neutral one-token request) decides; a channel whose probe
 * succeeds is kept and its streak reset, so only an upstream that fails a neutral request goes down.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;
let b: Scripted;

beforeAll(async () => {
  gw = await startGateway({ RELAY_HEALTH_FAILURES: '3', RELAY_PROBE_INTERVAL_MS: '600000' });
  a = upstream('anthropic');
  b = upstream('anthropic');
  // Both upstreams fail only on one input, like a server bug the client can trigger at will.
  for (const x of [a, b]) x.double.script((req) => (JSON.stringify(req.body?.messages ?? '').includes('TRIGGER-UPSTREAM-BUG') ? { error: { status: 500, message: 'internal error' } } : { text: 'fine' }));
  await addChannel(gw, { type: 'anthropic', url: a.url, models: ['claude-x'], name: 'a', priority: 1 });
  await addChannel(gw, { type: 'anthropic', url: b.url, models: ['claude-x'], name: 'b' });
  await setPrice(gw, 'claude-x');
});
afterAll(async () => {
  await a.stop();
  await b.stop();
  await gw.stop();
});

test('three requests from one user that make the upstreams fail do not take the model away from everyone else', async () => {
  const attacker = await keyedUser(gw, 10_000_000);
  const victim = await keyedUser(gw, 10_000_000);
  expect((await send(gw, victim.key, msg('claude-x'))).status).toBe(200);
  for (let i = 0; i < 3; i++) {
    const r = await send(gw, attacker.key, msg('claude-x', { messages: [{ role: 'user', content: 'TRIGGER-UPSTREAM-BUG' }] }));
    expect(r.status).toBe(502);
  }
  const after = await send(gw, victim.key, msg('claude-x'));
  expect(after.body?.error?.code ?? 'ok').toBe('ok');
  expect(after.status).toBe(200);
});

test('held: an upstream that answers 400/413/422 to everything never disables its channel (the client\'s fault, passed on)', async () => {
  const c = upstream('anthropic');
  try {
    c.double.script((_req, n) => ({ error: { status: [400, 413, 422][n % 3]!, message: 'no' } }));
    const id = await addChannel(gw, { type: 'anthropic', url: c.url, models: ['claude-y'], name: 'c' });
    await setPrice(gw, 'claude-y');
    const user = await keyedUser(gw, 10_000_000);
    for (let i = 0; i < 9; i++) expect((await send(gw, user.key, msg('claude-y'))).status).toBeLessThan(500);
    expect(c.hits).toBe(9);
    expect((await gw.api('GET', `/api/channel/${id}`)).body.data.status).toBe(1);
  } finally {
    await c.stop();
  }
});
