import { afterAll, beforeAll, expect, test } from 'bun:test';
import { startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, upstream, type Scripted, keyedUser, msg, send, setPrice } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['l1', 'l2'], mapping: { l2: 'l2-up' } });
  await setPrice(gw, 'l1');
  await setPrice(gw, 'l2');
});
afterAll(async () => { await up.stop(); await gw.stop(); });

test('admins list all logs with filters and paging; users only their own', async () => {
  const a = await keyedUser(gw);
  const b = await keyedUser(gw);
  for (let i = 0; i < 3; i++) expect((await send(gw, a.key, msg('l1'))).status).toBe(200);
  expect((await send(gw, a.key, msg('l2', { stream: true }))).status).toBe(200);
  up.queue.push({ error: { status: 500 } });
  expect((await send(gw, b.key, msg('l1'))).status).toBe(502);

  const all = await gw.api('GET', '/api/log/?page_size=2&p=1');
  expect(all.body.data).toMatchObject({ total: 5, page: 1, page_size: 2 });
  expect(all.body.data.items).toHaveLength(2);
  const byUser = await gw.api('GET', `/api/log/?user_id=${a.id}&model=l2`);
  expect(byUser.body.data.total).toBe(1);
  expect(byUser.body.data.items[0]).toMatchObject({ model: 'l2', upstream_model: 'l2-up', stream: true, user_id: a.id, api_key_id: a.keyId, status: 200, attempts: 1 });
  expect(byUser.body.data.items[0].channel_id).toBeGreaterThan(0);
  expect((await gw.api('GET', `/api/log/?token_id=${b.keyId}`)).body.data.total).toBe(1);
  expect((await gw.api('GET', '/api/log/?status=502')).body.data.items[0]).toMatchObject({ user_id: b.id, cost: 0, error_code: 'upstream_error' });
  const now = Math.floor(Date.now() / 1000);
  expect((await gw.api('GET', `/api/log/?start_timestamp=${now + 100}`)).body.data.total).toBe(0);
  expect((await gw.api('GET', `/api/log/?start_timestamp=${now - 100}&end_timestamp=${now + 100}`)).body.data.total).toBe(5);

  const mine = await gw.api('GET', '/api/log/self', undefined, b.token);
  expect(mine.body.data.total).toBe(1);
  expect(mine.body.data.items[0]).toMatchObject({ user_id: b.id, channel_id: null, upstream_model: '' });
  // A user cannot read all logs, nor filter themselves into another user's.
  expect((await gw.api('GET', '/api/log/', undefined, b.token)).status).toBe(403);
  expect((await gw.api('GET', `/api/log/self?user_id=${a.id}`, undefined, b.token)).body.data.total).toBe(1);
});
