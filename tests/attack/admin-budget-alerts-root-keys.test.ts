/**
 * The budget listing leaves out root's and other admins' key budgets for an admin below root
 * (admin-listings-root-keys.test.ts), yet the alert outbox still named those keys and budgets, and deleting such a
 * budget by id answered 403 role_too_high where an unknown id answers 404: both told the admin the ids it is
 * otherwise refused. Now their alerts carry key_id and budget_id null, and their budget ids answer 404 like unknown
 * ones; the admin's own and lower users' stay visible, and root sees all.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { addChannel, msg, send, setPrice, upstream, type Scripted } from '../e2e/relay-setup';

let gw: TestGateway;
let up: Scripted;
beforeAll(async () => {
  gw = await startGateway();
  up = upstream('anthropic');
  await addChannel(gw, { type: 'anthropic', url: up.url, models: ['k1'] });
  await setPrice(gw, 'k1');
}, 30_000);
afterAll(async () => { await up.stop(); await gw.stop(); }, 30_000);

/** A key of `token`'s user (root when undefined) under a daily budget of 1000, half of it spent by one request. */
async function budgetedKey(userId: number, token?: string): Promise<{ keyId: number; budgetId: number }> {
  await gw.services.ledger.apply({ userId, kind: 'topup', amount: 1_000_000, ref: `seed-${crypto.randomUUID()}`, at: 1 });
  const k = await gw.api('POST', '/api/token/', { name: 'k' }, token);
  expect(k.status).toBe(200);
  const b = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: k.body.data.id, period: 'daily', limit: 1000 }, token);
  expect(b.status).toBe(200);
  up.queue.push({ text: 'ok', usage: { input: 600, output: 0 } });
  expect((await send(gw, k.body.data.key, msg('k1', { max_tokens: 1 }))).status).toBe(200);
  return { keyId: k.body.data.id, budgetId: b.body.data.id };
}

type Alert = { event_id: string; payload: { data: { key_id: number | null; budget_id: number | null; user_id: number } } };
const alertsOf = async (token?: string) => (await gw.api('GET', '/api/budget/alerts?page_size=100', undefined, token)).body.data.items as Alert[];

test('an admin below root sees no key or budget id of root or another admin in the alert outbox, and deleting such a budget answers 404', async () => {
  const root = (await gw.services.users.byUsername('root'))!;
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const user = await makeUser(gw, 1);
  const rootB = await budgetedKey(root.id);
  const peerB = await budgetedKey(peer.id, peer.token);
  const ownB = await budgetedKey(admin.id, admin.token);
  const userB = await budgetedKey(user.id, user.token);
  const all = [rootB, peerB, ownB, userB];

  // Alerts are written when the charges commit: wait until root sees one per key.
  const deadline = Date.now() + 10_000;
  let rootView: Alert[] = [];
  while (Date.now() < deadline) {
    rootView = await alertsOf();
    if (all.every((b) => rootView.some((a) => a.payload.data.key_id === b.keyId))) break;
    await Bun.sleep(50);
  }
  const eventOf = (keyId: number) => rootView.find((a) => a.payload.data.key_id === keyId)!.event_id;
  for (const b of all) expect(rootView.find((a) => a.payload.data.key_id === b.keyId)?.payload.data.budget_id).toBe(b.budgetId);

  const adminView = await alertsOf(admin.token);
  const seen = (b: { keyId: number }) => {
    const d = adminView.find((a) => a.event_id === eventOf(b.keyId))!.payload.data;
    return [d.key_id, d.budget_id];
  };
  expect(all.map(seen)).toEqual([[null, null], [null, null], [ownB.keyId, ownB.budgetId], [userB.keyId, userB.budgetId]]);
  expect(JSON.stringify(adminView)).not.toContain(`"key_id":${rootB.keyId},`);

  // Deleting by id: root's and the peer's key budgets answer exactly as an unknown id does.
  const unknown = await gw.api('DELETE', '/api/budget/999999', undefined, admin.token);
  expect(unknown.status).toBe(404);
  for (const b of [rootB, peerB]) {
    const r = await gw.api('DELETE', `/api/budget/${b.budgetId}`, undefined, admin.token);
    expect([r.status, r.body.error?.code]).toEqual([404, unknown.body.error?.code]);
    expect(r.body.error?.message).toBe(unknown.body.error?.message.replace('999999', String(b.budgetId)));
  }
  for (const b of [ownB, userB]) expect((await gw.api('DELETE', `/api/budget/${b.budgetId}`, undefined, admin.token)).status).toBe(200);
  // Root still may.
  expect((await gw.api('DELETE', `/api/budget/${peerB.budgetId}`)).status).toBe(200);
}, 30_000);
