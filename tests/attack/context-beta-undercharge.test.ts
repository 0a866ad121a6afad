/**
 * Attack: get input tokens for free by raising the upstream's context window with a client header the
 * gateway forwards (`anthropic-beta: context-1m-…`), while billing clamps reported input to the model's
 * configured context window (price row `context_window`, else BILLING_DEFAULT_CONTEXT_TOKENS = 200k).
 * The upstream reads and bills the operator for 800k input tokens; the user is billed 200k, flagged
 * `implausible`. Real gateway, Anthropic double reporting the usage a 1M-context request would have.
 *
 * Fixed: a `context-1m-*` beta raises the request's context window to 1,000,000 tokens for both the
 * reservation and the usage clamp (over-reserving when a channel strips the beta is the safe side).
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
