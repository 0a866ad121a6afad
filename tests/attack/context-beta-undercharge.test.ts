/**
 * Attack: get input tokens for free by raising the upstream's context window with a client header the
 * gateway forwards (`anthropic-beta: context-1m-…`), while billing clamps reported input to the model's
 * configured context window (price row `context_window`, else BILLING_DEFAULT_CONTEXT_TOKENS = 200k).
 * The upstream reads and bills the operator for 800k input tokens; the user is billed 200k, flagged
 * `implausible`. Real gateway, Anthropic double reporting the usage a 1M-context request would have.
 *
 * Fixed: a `context-1m-*` beta raises the request's context window to 1,000,000 tokens for both the
 * reservation and the usage clamp (over-reserving when a channel strips the beta is the safe side). So does one the
 * channel itself sends (its own `anthropic-beta` header, or a header_policy rewrite of the client's beta): before,
 * the client needed to send nothing at all, and 800k input tokens were billed as 200k on such a channel.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { V, addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let a: Scripted;

beforeAll(async () => {
  gw = await startGateway();
  a = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: a.url, models: ['claude-x'] });
  await setPrice(gw, 'claude-x');
  // The channel asks for the 1M context itself: its own anthropic-beta header, or a rewrite of a client's beta.
  for (const [model, extra] of [
    ['claude-own', { headers: { 'anthropic-beta': 'context-1m-2025-08-07' } }],
    ['claude-rw', { header_policy: { beta_rewrite: { 'long-please': 'context-1m-2025-08-07' } } }],
  ] as const) {
    const r = await gw.api('POST', '/api/channel/', { name: model, type: 'anthropic', base_url: a.url, key: 'upstream-key', models: [model], ...extra });
    expect(r.status).toBe(200);
    await setPrice(gw, model);
  }
});
afterAll(async () => {
  await a.stop();
  await gw.stop();
});

const rowOf = (id: string) => gw.db.get('select * from usage_logs where request_id = ?', id);

test('800k input tokens read under a forwarded context-1m beta are billed as 800k, not clamped to 200k', async () => {
  const u = await keyedUser(gw, 2_000_000_000);
  a.queue.push({ usage: { input: 800_000, output: 10 } });
  const r = await send(gw, u.key, msg('claude-x'), { ...V, 'anthropic-beta': 'context-1m-2025-08-07' });
  expect(r.status).toBe(200);
  // The header really reached the upstream, so it did read past 200k.
  expect(a.last().headers['anthropic-beta']).toBe('context-1m-2025-08-07');
  gw.services.relay.quota.flush();
  const row = await rowOf(r.headers.get('request-id')!);
  expect({ input: row.input_tokens, flag: row.usage_flag }).toEqual({ input: 800_000, flag: '' });
});

for (const [model, beta, sent] of [
  ['claude-own', undefined, 'context-1m-2025-08-07'],
  ['claude-rw', 'long-please', 'context-1m-2025-08-07'],
] as const) {
  test(`800k input tokens read under a context-1m beta the channel sends (${model}) are billed as 800k`, async () => {
    const u = await keyedUser(gw, 2_000_000_000);
    a.queue.push({ usage: { input: 800_000, output: 10 } });
    const r = await send(gw, u.key, msg(model), { ...V, ...(beta ? { 'anthropic-beta': beta } : {}) });
    expect(r.status).toBe(200);
    expect(a.last().headers['anthropic-beta']).toBe(sent);
    gw.services.relay.quota.flush();
    const row = await rowOf(r.headers.get('request-id')!);
    expect({ input: row.input_tokens, flag: row.usage_flag }).toEqual({ input: 800_000, flag: '' });
  });
}
