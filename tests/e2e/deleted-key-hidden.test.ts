/**
 * An admin below root sees no key id of root's or another admin's rows, and a `token_id` naming such a key matches
 * nothing. That held only while the key existed: the check asked the in-memory key index, which forgets a deleted
 * key, so once the other admin deleted it, its id listed, exported and summed their rows again (showing which of
 * their requests that key made). The owner of a deleted key is now looked up (deleted_api_keys). Real HTTP.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, msg, send, setPrice, upstream, type Scripted } from './relay-setup';

let gw: TestGateway;
let up: Scripted;
let other: Awaited<ReturnType<typeof makeUser>>;
let viewer: Awaited<ReturnType<typeof makeUser>>;
let keyId: number;
const now = () => Math.floor(Date.now() / 1000);

beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['dkh'] });
  await setPrice(gw, 'dkh');
  other = await makeUser(gw, 10);
  viewer = await makeUser(gw, 10);
  await gw.services.ledger.apply({ userId: other.id, kind: 'topup', amount: 1_000_000, ref: `seed-${other.id}`, at: 1 });
  const k = await gw.api('POST', '/api/token/', { name: 'k' }, other.token);
  expect(k.status).toBe(200);
  keyId = k.body.data.id;
  for (let i = 0; i < 2; i++) expect((await send(gw, k.body.data.key, msg('dkh'))).status).toBe(200);
}, 60_000);
afterAll(async () => { await up.stop(); await gw.stop(); });

/** What the viewer gets for a filter by the other admin's key: listing total, exported lines, summed requests. */
async function seen(token: string) {
  const list = await gw.api('GET', `/api/log/?token_id=${keyId}`, undefined, token);
  const exp = await fetch(`${gw.url}/api/log/export?format=jsonl&token_id=${keyId}`, { headers: { authorization: `Bearer ${token}` } });
  const stats = await gw.api('GET', `/api/log/stats?token_id=${keyId}&start_timestamp=${now() - 3600}&end_timestamp=${now() + 60}`, undefined, token);
  expect([list.status, exp.status, stats.status]).toEqual([200, 200, 200]);
  const lines = (await exp.text()).split('\n').filter(Boolean).length;
  return { listed: list.body.data.total, exported: lines, summed: stats.body.data.items.reduce((n: number, r: any) => n + r.requests, 0) };
}

test("another admin's key matches nothing for an admin below root, before and after it is deleted; root still finds its rows", async () => {
  expect(await seen(viewer.token)).toEqual({ listed: 0, exported: 0, summed: 0 });
  expect((await gw.api('DELETE', `/api/token/${keyId}`, undefined, other.token)).status).toBe(200);
  expect(await seen(viewer.token)).toEqual({ listed: 0, exported: 0, summed: 0 });
  expect(await seen(gw.rootToken)).toEqual({ listed: 2, exported: 2, summed: 2 });
  // The owner sees their own deleted key's rows.
  const own = await gw.api('GET', `/api/log/self?token_id=${keyId}`, undefined, other.token);
  expect(own.body.data.total).toBe(2);
}, 30_000);
