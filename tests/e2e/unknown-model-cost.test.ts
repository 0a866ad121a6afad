/**
 * A client may name any model. Telling an unknown model (404) from one whose channels are all down (503) must not
 * cost a scan of every channel's models: with thousands of channels each unknown name cost milliseconds of the
 * event loop, which one key repeating such requests turned into everyone's latency.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' }); });
afterAll(async () => { await gw.stop(); });

const CHANNELS = 1000;
const MODELS = 1000;

test('an unknown model costs no more than a refused body, with 1,000 channels of 1,000 models; 404 and 503 stay apart', async () => {
  const node = nodeOne(gw);
  const models = Array.from({ length: MODELS }, (_, i) => `bulk-model-${i}`);
  const made = await node.api('POST', '/api/channel/', { name: 'bulk', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-bulk-key-000000001', models, status: 2 });
  expect(made.status).toBe(200);
  // Copies of that row straight into the table, then node 1 reloads its snapshot. Few channels of many models: on
  // PostgreSQL each inserted row is also announced and re-read on its own.
  const cols = Object.keys((await gw.db.get('select * from channels where id = ?', made.body.data.id))!).filter((c) => c !== 'id').map((c) => `"${c}"`).join(', ');
  await gw.db.all(`insert into channels (${cols}) with recursive n(i) as (select 1 union all select i + 1 from n where i < ${CHANNELS - 1}) select ${cols} from channels, n where channels.id = ?`, made.body.data.id);
  await gw.services.channelRegistry.refresh(null);
  expect(gw.services.channelRegistry.all().length).toBeGreaterThanOrEqual(CHANNELS);

  const u = await keyedUser(gw);
  // Served only by disabled channels: 503; named by none: 404.
  await setPrice(gw, 'bulk-model-7');
  const down = await send(node, u.key, msg('bulk-model-7'));
  expect([down.status, down.body.error?.type]).toEqual([503, 'overloaded_error']);
  expect((await send(node, u.key, msg('bulk-model-unknown'))).status).toBe(404);
  // The count follows deletes and groups: a model whose only (disabled) channel went, or that only another group's
  // channel serves, is unknown to this user.
  for (const m of ['lone-model', 'vip-model']) await setPrice(gw, m);
  const lone = await node.api('POST', '/api/channel/', { name: 'lone', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-lone-key-000000001', models: ['lone-model'], status: 2 });
  await node.api('POST', '/api/channel/', { name: 'vip', type: 'anthropic', base_url: 'http://127.0.0.1:9', key: 'sk-vip-key-0000000001', models: ['vip-model'], group: 'vip', status: 2 });
  expect((await send(node, u.key, msg('lone-model'))).status).toBe(503);
  expect((await send(node, u.key, msg('vip-model'))).status).toBe(404);
  expect((await node.api('DELETE', `/api/channel/${lone.body.data.id}`)).status).toBe(200);
  expect((await send(node, u.key, msg('lone-model'))).status).toBe(404);

  // Interleaved, so a loaded machine slows both alike: a body refused before routing, and an unknown model.
  let refused = 0;
  let unknown = 0;
  for (let i = 0; i < 100; i++) {
    let t = performance.now();
    expect((await send(node, u.key, { model: 'bulk-model-7', max_tokens: 5 })).status).toBe(400);
    refused += performance.now() - t;
    t = performance.now();
    expect((await send(node, u.key, msg(`bulk-unknown-${i}`))).status).toBe(404);
    unknown += performance.now() - t;
  }
  console.log(`100 requests: refused body ${refused.toFixed(0)} ms, unknown model ${unknown.toFixed(0)} ms`);
  expect(unknown).toBeLessThan(refused * 2 + 200);
}, 60_000);
