/**
 * Attack: a member of a group with a tokens-per-minute limit who cannot pay (balance 0, a free sign-up) sends
 * requests with a large max_tokens. Each is refused (402, or 404 for a model nobody serves) before anything is
 * sent upstream, but admission had already counted its tokens against the group's (and the owner's) window, so a
 * few refused requests a minute locked every paying member of the group out with 429 group_tpm_exceeded, at no
 * cost to the attacker. Tokens are now given back when a request is refused before any upstream is called.
 * Likewise a request refused by one limit (its key's tokens per minute) no longer spends the earlier-checked
 * windows (its owner's and group's requests per minute): a key's own limits bound what it takes of shared ones.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;

beforeAll(async () => {
  gw = await startGateway({ BILLING_FLUSH_MS: '1' });
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['x-model'], group: 'default,metered,paced' });
  await setPrice(gw, 'x-model');
  // Priced but served by no channel: refused by routing, after the quota check.
  await setPrice(gw, 'priced-unserved');
  expect((await gw.api('POST', '/api/group/', { name: 'metered', rate_limit_tpm: 5_000 })).status).toBe(200);
  expect((await gw.api('POST', '/api/group/', { name: 'paced', rate_limit_rpm: 5 })).status).toBe(200);
}, 30_000);
afterAll(async () => {
  await up.stop();
  await gw.stop();
});

async function member(balance: number, group = 'metered', key: Record<string, unknown> = {}) {
  const u = await keyedUser(gw, balance, key);
  expect((await gw.api('PUT', '/api/user/', { id: u.id, group })).status).toBe(200);
  return u;
}

test('requests refused before any upstream call (402 quota, 404 unknown model) use none of the group tokens per minute', async () => {
  const broke = await member(0);
  const payer = await member(100_000_000);
  await clearOfWindowEdge(15_000);
  const big = msg('x-model', { max_tokens: 3_000 });
  for (let i = 0; i < 5; i++) {
    const r = await send(gw, broke.key, big);
    expect(r.status).toBe(402);
  }
  for (const model of ['nobody-serves-this', 'priced-unserved']) {
    for (let i = 0; i < 3; i++) {
      const r = await send(gw, payer.key, msg(model, { max_tokens: 3_000 }));
      expect(r.status).toBe(404);
    }
  }
  const r = await send(gw, payer.key, big);
  expect(r.body.error?.code ?? null).toBeNull();
  expect(r.status).toBe(200);
}, 30_000);

test("a request a key's own limit refuses uses none of its owner's or group's requests per minute", async () => {
  // The key's tokens-per-minute limit refuses every request; the group's rpm, counted first, was spent by each.
  const capped = await member(100_000_000, 'paced', { rate_limit_tpm: 1 });
  const other = await member(100_000_000, 'paced');
  await clearOfWindowEdge(15_000);
  for (let i = 0; i < 10; i++) {
    const r = await send(gw, capped.key, msg('x-model'));
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('key_tpm_exceeded');
  }
  const r = await send(gw, other.key, msg('x-model'));
  expect(r.body.error?.code ?? null).toBeNull();
  expect(r.status).toBe(200);
}, 30_000);
