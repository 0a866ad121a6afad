/**
 * An admin below root naming a key of root or of another admin gets the 404 of an unknown id
 * (admin-key-oracle.test.ts), yet the budget listing and the usage-log listing and export showed it those very key
 * ids. Now they don't: key budgets of users at or above the admin are left out of GET /api/budget/, their log rows
 * carry api_key_id null, statistics by key sum them in the null group, and a token_id naming one of their keys
 * matches nothing, like an unknown id. The rows
 * themselves stay listed (admins see every request, as they see every user), and root still sees every key id.
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

/** A key of `token`'s user (root when null) with a balance, and one request made with it. */
async function keyWithRequest(userId: number, token: string | null) {
  await gw.services.ledger.apply({ userId, kind: 'topup', amount: 1_000_000, ref: `seed-${userId}-${crypto.randomUUID()}`, at: 1 });
  const k = await gw.api('POST', '/api/token/', { name: 'k' }, token ?? undefined);
  expect(k.status).toBe(200);
  expect((await send(gw, k.body.data.key, msg('k1'))).status).toBe(200);
  return k.body.data.id as number;
}

test("an admin below root sees no key id of root or another admin in the budget and usage-log listings and statistics", async () => {
  const root = (await gw.services.users.byUsername('root'))!;
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const rootKey = await keyWithRequest(root.id, null);
  const peerKey = await keyWithRequest(peer.id, peer.token);
  const ownKey = await keyWithRequest(admin.id, admin.token);
  const user = await keyedUser(gw);
  expect((await send(gw, user.key, msg('k1'))).status).toBe(200);
  for (const id of [rootKey, peerKey, ownKey, user.keyId]) {
    expect((await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: id, period: 'daily', limit: 1_000_000 })).status).toBe(200);
  }
  expect((await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: peer.id, period: 'daily', limit: 1_000_000 })).status).toBe(200);

  // Budgets: the keys the admin may manage (its own, the user's); user budgets are listed as users are.
  const budgets = (await gw.api('GET', '/api/budget/', undefined, admin.token)).body.data as Array<{ scope: string; subject_id: number }>;
  expect(budgets.filter((b) => b.scope === 'key').map((b) => b.subject_id).sort((a, b) => a - b)).toEqual([ownKey, user.keyId].sort((a, b) => a - b));
  expect(budgets.some((b) => b.scope === 'user' && b.subject_id === peer.id)).toBe(true);
  for (const id of [rootKey, peerKey]) {
    expect((await gw.api('GET', `/api/budget/?scope=key&subject_id=${id}`, undefined, admin.token)).body.data).toEqual([]);
  }
  // Root sees all four.
  expect((await gw.api('GET', '/api/budget/?scope=key')).body.data.length).toBeGreaterThanOrEqual(4);

  // Usage logs: every row is listed; the key id only where the admin may see the key.
  const rows = (await gw.api('GET', '/api/log/?page_size=100', undefined, admin.token)).body.data.items as Array<{ user_id: number; api_key_id: number | null }>;
  const keyOf = (uid: number) => rows.filter((r) => r.user_id === uid).map((r) => r.api_key_id);
  expect([keyOf(root.id), keyOf(peer.id), keyOf(admin.id), keyOf(user.id)]).toEqual([[null], [null], [ownKey], [user.keyId]]);
  const unknown = (await gw.api('GET', '/api/log/?token_id=999999', undefined, admin.token)).body.data;
  expect(unknown).toMatchObject({ items: [], total: 0 });
  for (const id of [rootKey, peerKey]) {
    expect((await gw.api('GET', `/api/log/?token_id=${id}`, undefined, admin.token)).body.data).toEqual(unknown);
    const csv = await fetch(`${gw.url}/api/log/export?token_id=${id}`, { headers: { authorization: `Bearer ${admin.token}` } });
    expect((await csv.text()).trim().split('\n')).toHaveLength(1); // the header alone
  }
  expect((await gw.api('GET', `/api/log/?token_id=${user.keyId}`, undefined, admin.token)).body.data.total).toBe(1);
  const jsonl = await fetch(`${gw.url}/api/log/export?format=jsonl`, { headers: { authorization: `Bearer ${admin.token}` } });
  const exported = (await jsonl.text()).trim().split('\n').map((l) => JSON.parse(l) as { user_id: number; api_key_id: number | null });
  expect(exported.filter((r) => r.user_id === root.id || r.user_id === peer.id).map((r) => r.api_key_id)).toEqual([null, null]);
  expect(exported.find((r) => r.user_id === user.id)?.api_key_id).toBe(user.keyId);

  // Statistics by key: the hidden keys' requests are summed in the null group; a token_id of theirs matches nothing.
  const groups = (await gw.api('GET', '/api/log/stats?group_by=key', undefined, admin.token)).body.data.items as Array<{ group: number | null; requests: number }>;
  const byGroup = new Map<number | null, number>();
  for (const g of groups) byGroup.set(g.group, (byGroup.get(g.group) ?? 0) + g.requests);
  expect([byGroup.has(rootKey), byGroup.has(peerKey), byGroup.get(ownKey), byGroup.get(user.keyId), byGroup.get(null)]).toEqual([false, false, 1, 1, 2]);
  for (const id of [rootKey, peerKey, 999_999]) {
    expect((await gw.api('GET', `/api/log/stats?token_id=${id}`, undefined, admin.token)).body.data.items).toEqual([]);
  }
  expect((await gw.api('GET', `/api/log/stats?token_id=${user.keyId}`, undefined, admin.token)).body.data.items).toHaveLength(1);
  expect((await gw.api('GET', '/api/log/stats?group_by=key')).body.data.items.some((g: { group: number }) => g.group === rootKey)).toBe(true);

  // Root sees every key id.
  const all = (await gw.api('GET', '/api/log/?page_size=100')).body.data.items as Array<{ user_id: number; api_key_id: number | null }>;
  expect(all.find((r) => r.user_id === peer.id)?.api_key_id).toBe(peerKey);
  expect((await gw.api('GET', `/api/log/?token_id=${rootKey}`)).body.data.total).toBe(1);
}, 30_000);
/**
 * The listings asked the relay's key index whose a key is, and that index leaves out the keys of disabled users:
 * once root disabled another admin, that admin's key ids came back to every other admin (its key budgets, its key
 * as a group of statistics by key, its rows under a token_id filter). A disabled account's keys are still its own.
 */
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
    const listed = budgets.map((b) => b.subject_id);
    expect([listed.includes(peerKey), listed.includes(user.keyId)]).toEqual([false, true]);
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
}, 20_000);

/**
 * Statistics by key asked the key index whose a key is, and the index forgets a deleted key: once another admin
 * deleted its key, that key's id came back to every other admin as a group of statistics by key, while the listing
 * (which reads the row's owner) kept it hidden. A deleted key of a user the admin manages stays listed by id in both.
 */
test("another admin's deleted key stays hidden from statistics by key, as in the listing; a managed user's deleted key stays shown", async () => {
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const peerKey = await keyWithRequest(peer.id, peer.token);
  const user = await keyedUser(gw);
  expect((await send(gw, user.key, msg('k1'))).status).toBe(200);
  expect((await gw.api('DELETE', `/api/token/${peerKey}`, undefined, peer.token)).status).toBe(200);
  expect((await gw.api('DELETE', `/api/token/${user.keyId}`, undefined, user.token)).status).toBe(200);
  // Each node in turn (behind the cluster proxy): none answers from a key index that forgot the key.
  for (let i = 0; i < 3; i++) {
    const rows = (await gw.api('GET', '/api/log/?page_size=100', undefined, admin.token)).body.data.items as Array<{ user_id: number; api_key_id: number | null }>;
    expect([rows.find((r) => r.user_id === peer.id)?.api_key_id, rows.find((r) => r.user_id === user.id)?.api_key_id]).toEqual([null, user.keyId]);
    const groups = (await gw.api('GET', '/api/log/stats?group_by=key', undefined, admin.token)).body.data.items as Array<{ group: number | null }>;
    expect([groups.some((g) => g.group === peerKey), groups.some((g) => g.group === user.keyId), groups.some((g) => g.group === null)]).toEqual([false, true, true]);
    expect((await gw.api('GET', `/api/log/stats?token_id=${peerKey}`, undefined, admin.token)).body.data.items).toEqual([]);
  }
  const rootGroups = (await gw.api('GET', '/api/log/stats?group_by=key')).body.data.items as Array<{ group: number | null }>;
  expect(rootGroups.some((g) => g.group === peerKey)).toBe(true);
}, 20_000);

/**
 * An account whose CI makes and deletes a key per run leaves thousands of deleted keys. Statistics by key looked each
 * one the key index forgot up in turn, one read per key inside the caller's history-read turn (on SQLite, synchronous
 * reads on the event loop): thousands of reads per admin call. Now one batched read answers them all, and the
 * hiding holds for every one of them. Counted on node 1's own stores (past the cluster proxy).
 */
test('statistics by key over thousands of deleted keys look their owners up in one batched read, and still hide the hidden ones', async () => {
  const admin = await makeUser(gw, 10);
  const peer = await makeUser(gw, 10);
  const user = await makeUser(gw);
  // makeUser writes past the change bus: the node's user directory is told as an account change would tell it.
  for (const u of [admin, peer, user]) await gw.services.userDirectory.refresh(u.id);
  const N = 3_000;
  const base = 7_000_000;
  const at = Math.floor(Date.now() / 1000) - 60;
  // The peer admin's CI: N keys made and deleted, one request each; the last one is a managed user's.
  await gw.db.all(`with recursive s(i) as (select 1 union all select i + 1 from s where i < ${N})
    insert into deleted_api_keys (id, user_id) select ${base} + i, case when i = ${N} then ${user.id} else ${peer.id} end from s`);
  await gw.db.all(`insert into usage_logs (request_id, user_id, api_key_id, model, status, created_at)
    select 'req_ci_' || id, user_id, id, 'k1', 200, ${at} from deleted_api_keys where id > ${base}`);

  const stores = gw.services.stores as { usageLogs: object };
  const real = stores.usageLogs;
  let reads = 0;
  stores.usageLogs = new Proxy(real, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      return typeof v === 'function' ? (...args: unknown[]) => { reads++; return v.apply(target, args); } : v;
    },
  });
  try {
    const r = await gw.nodeApi('GET', '/api/log/stats?group_by=key', undefined, admin.token);
    expect(r.status).toBe(200);
    const groups = new Set((r.body.data.items as Array<{ group: number | null }>).map((g) => g.group));
    expect([groups.has(base + 1), groups.has(base + N - 1), groups.has(base + N), groups.has(null)]).toEqual([false, false, true, true]);
    expect(reads).toBeLessThanOrEqual(1);
  } finally {
    stores.usageLogs = real;
  }
}, 20_000);
