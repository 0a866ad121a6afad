/**
 * A request that fails over to a channel billing another upstream model is billed at that model's price as admitted,
 * not at the first channel's (a cheap model that failed) nor the requested model's.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, nodeOne, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
const ups: Scripted[] = [];
beforeAll(async () => { gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' }); });
afterAll(async () => { for (const u of ups) await u.stop(); await gw.stop(); });

test('failover from a cheap upstream model to a dear one bills the dear one', async () => {
  await setPrice(gw, 'fo-req', { input: 1, output: 1 });
  await setPrice(gw, 'fo-cheap', { input: 2, output: 2 });
  await setPrice(gw, 'fo-dear', { input: 1_000_000, output: 2_000_000 });
  const bad = upstream('anthropic', { error: { status: 500, message: 'boom' } });
  const good = upstream('anthropic', { text: 'hi', usage: { input: 900, output: 500 } });
  ups.push(bad, good);
  const a = await addChannel(gw, { type: 'anthropic', url: bad.url, models: ['fo-req'], mapping: { 'fo-req': 'fo-cheap' }, priority: 2 });
  const b = await addChannel(gw, { type: 'anthropic', url: good.url, models: ['fo-req'], mapping: { 'fo-req': 'fo-dear' }, priority: 1 });
  for (const id of [a, b]) expect((await gw.api('PUT', '/api/channel/', { id, billing_model: 'upstream' })).status).toBe(200);
  const u = await keyedUser(gw, 100_000_000);
  for (const stream of [false, true]) {
    const r = await send(nodeOne(gw), u.key, msg('fo-req', { stream }));
    expect(r.status).toBe(200);
    const row = await gw.db.get('select cost, billed_model, channel_id, input_tokens, output_tokens from usage_logs where user_id = ? order by id desc limit 1', u.id);
    expect(row).toMatchObject({ billed_model: 'fo-dear', channel_id: b, input_tokens: 900 });
    // fo-dear: 1 unit per input token, 2 per output token (fo-cheap would bill 2 and 2, fo-req 1 and 1).
    expect(row.cost).toBe(row.input_tokens + 2 * row.output_tokens);
  }
  expect(bad.hits).toBe(2);
}, 20_000);
