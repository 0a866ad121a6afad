/**
 * Many channels of one priority serving one model (a pool of accounts): every request orders them by weight. The
 * order was drawn one pick at a time, O(n^2) per request; it is now one sort. Measured against a model with a
 * single channel on the same upstream, interleaved, so a loaded machine slows both alike.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { startAnthropicUpstream, type UpstreamDouble } from '../doubles/anthropic-upstream';
import { keyedUser, msg, nodeOne, send, setPrice } from './relay-setup';

let gw: TestGateway;
let up: UpstreamDouble;
beforeAll(async () => {
  gw = await startGateway({ RELAY_PROBE_INTERVAL_MS: '3600000' });
  up = startAnthropicUpstream({ maxRecorded: 10 });
});
afterAll(async () => { await up.stop(); await gw.stop(); });

// Fewer on PostgreSQL, where each inserted row is also announced and re-read on its own by every node.
const CHANNELS = ON_PG ? 1500 : 3000;

test('a request to a model with thousands of channels in one tier costs about what one with a single channel does (within 4x)', async () => {
  const node = nodeOne(gw);
  for (const m of ['wide-model', 'narrow-model']) await setPrice(gw, m);
  const channel = async (model: string, weight: number) => {
    const r = await node.api('POST', '/api/channel/', { name: model, type: 'anthropic', base_url: up.url, key: 'sk-wide-key-000000001', models: [model], weight });
    expect(r.status).toBe(200);
    return r.body.data.id as number;
  };
  const wide = await channel('wide-model', 5);
  await channel('narrow-model', 1);
  // Copies of the wide channel straight into the table (weights 1..7), then node 1 reloads its snapshot.
  const cols = Object.keys((await gw.db.get('select * from channels where id = ?', wide))!).filter((c) => c !== 'id' && c !== 'weight').map((c) => `"${c}"`).join(', ');
  await gw.db.all(`insert into channels (${cols}, "weight") with recursive n(i) as (select 1 union all select i + 1 from n where i < ${CHANNELS - 1}) select ${cols}, 1 + n.i % 7 from channels, n where channels.id = ?`, wide);
  await gw.services.channelRegistry.refresh(null);
  expect(gw.services.channelRegistry.candidates('wide-model', 'default').length).toBe(CHANNELS);

  const u = await keyedUser(gw);
  let narrow = 0;
  let wideMs = 0;
  for (let i = 0; i < 50; i++) {
    let t = performance.now();
    expect((await send(node, u.key, msg('narrow-model'))).status).toBe(200);
    narrow += performance.now() - t;
    t = performance.now();
    expect((await send(node, u.key, msg('wide-model'))).status).toBe(200);
    wideMs += performance.now() - t;
  }
  console.log(`50 requests: one channel ${narrow.toFixed(0)} ms, ${CHANNELS} channels ${wideMs.toFixed(0)} ms`);
  expect(wideMs).toBeLessThan(narrow * 4 + 300);
}, 60_000);
