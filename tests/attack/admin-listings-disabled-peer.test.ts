/**
 * The listings hide root's and other admins' key ids from an admin below root (admin-listings-root-keys.test.ts),
 * but they asked the relay's key index who owns a key, and that index leaves out the keys of disabled users. Once
 * root disabled another admin (or one of several roots), that admin's key ids came back to every other admin: its
 * key budgets in GET /api/budget/, its key as a group of GET /api/log/stats?group_by=key, and a token_id filter
 * naming its key matched its rows. A disabled account's keys are still its own: they stay hidden.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, keyedUser, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['k1'] });
  await setPrice(gw, 'k1');
}, 30_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 30_000);

async function keyWithRequest(userId: number, token: string) {
  await gw.services.ledger.apply({ userId, kind: 'topup', amount: 1_000_000, ref: `seed-${userId}-${crypto.randomUUID()}`, at: 1 });
  const k = await gw.api('POST', '/api/token/', { name: 'k' }, token);
  expect(k.status).toBe(200);
  expect((await send(gw, k.body.data.key, msg('k1'))).status).toBe(200);
  return k.body.data.id as number;
}

test("a disabled admin's key ids stay hidden from other admins in budgets, log filters and statistics", async () => {
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const peerKey = await keyWithRequest(peer.id, peer.token);
  const user = await keyedUser(gw);
  expect((await send(gw, user.key, msg('k1'))).status).toBe(200);
  for (const id of [peerKey, user.keyId]) {
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: id, period: 'daily', limit: 1_000_000 })).status).toBe(200);
  }
  expect((await gw.api('POST', `/api/user/${peer.id}/disable`)).status).toBe(200);
  // Each node in turn (behind the cluster proxy): none answers from a key index that forgot the owner.
  for (let i = 0; i < 3; i++) {
    const budgets = (await gw.api('GET', '/api/budget/?scope=key', undefined, admin.token)).body.data as Array<{ subject_id: number }>;
    expect(budgets.map((b) => b.subject_id)).toEqual([user.keyId]);
    expect((await gw.api('GET', `/api/budget/?scope=key&subject_id=${peerKey}`, undefined, admin.token)).body.data).toEqual([]);

    const filtered = (await gw.api('GET', `/api/log/?token_id=${peerKey}`, undefined, admin.token)).body.data;
    expect({ total: filtered.total, items: filtered.items }).toEqual({ total: 0, items: [] });
    const csv = await fetch(`${gw.url}/api/log/export?token_id=${peerKey}`, { headers: { authorization: `Bearer ${admin.token}` } });
    expect((await csv.text()).trim().split('\n')).toHaveLength(1); // the header alone

    const groups = (await gw.api('GET', '/api/log/stats?group_by=key', undefined, admin.token)).body.data.items as Array<{ group: number | null }>;
    expect(groups.some((g) => g.group === peerKey)).toBe(false);
    expect(groups.some((g) => g.group === user.keyId)).toBe(true);
    expect((await gw.api('GET', `/api/log/stats?token_id=${peerKey}`, undefined, admin.token)).body.data.items).toEqual([]);
  }
  // Root still sees every key id, the disabled admin's included.
  expect((await gw.api('GET', `/api/budget/?scope=key&subject_id=${peerKey}`)).body.data.map((b: { subject_id: number }) => b.subject_id)).toEqual([peerKey]);
  expect((await gw.api('GET', `/api/log/?token_id=${peerKey}`)).body.data.total).toBe(1);
  const rootGroups = (await gw.api('GET', '/api/log/stats?group_by=key')).body.data.items as Array<{ group: number | null }>;
  expect(rootGroups.some((g) => g.group === peerKey)).toBe(true);
});
