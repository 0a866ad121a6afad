/**
 * Budgets outliving their subject: a key or user deleted left its budgets behind. They stayed listed forever
 * (to an admin below root too, naming a deleted root key by id, limit and spend, where no key budget of root's
 * may show), and nobody could remove them: `DELETE /api/budget/:id` of a listed id answered 404 `token_not_found`
 * / `user_not_found`. A user could also pile such rows up without bound (create a key, budget it, delete it),
 * each loaded into every node's budget book. A budget now goes with its subject, in the deleting transaction.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser } from '../e2e/relay-setup';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

const budgetIds = async (token?: string) => {
  const r = await gw.api('GET', '/api/budget/', undefined, token);
  expect(r.status).toBe(200);
  return (r.body.data as Array<{ id: number }>).map((b) => b.id);
};

test("a deleted key's budgets go with it: not listed (to an admin below root, a root key's), none left undeletable", async () => {
  const admin = await makeUser(gw, 10);
  const key = await gw.api('POST', '/api/token/', { name: 'root-key' });
  expect(key.status).toBe(200);
  const set = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: key.body.data.id, period: 'daily', limit: 777 });
  expect(set.status).toBe(200);
  expect(await budgetIds(admin.token)).not.toContain(set.body.data.id);

  expect((await gw.api('DELETE', `/api/token/${key.body.data.id}`)).status).toBe(200);
  expect(await budgetIds(admin.token)).not.toContain(set.body.data.id);
  expect(await budgetIds()).not.toContain(set.body.data.id);
  // Its id is now as unknown as any other.
  const del = await gw.api('DELETE', `/api/budget/${set.body.data.id}`);
  expect([del.status, del.body.error?.code]).toEqual([404, 'budget_not_found']);
});

test("a deleted user's budgets and their keys' budgets go with the user", async () => {
  const victim = await keyedUser(gw);
  const own = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: victim.keyId, period: 'monthly', limit: 50 }, victim.token);
  const user = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: victim.id, period: 'daily', limit: 500 });
  expect([own.status, user.status]).toEqual([200, 200]);
  expect((await gw.api('DELETE', `/api/user/${victim.id}`)).status).toBe(200);
  const left = await budgetIds();
  expect(left).not.toContain(own.body.data.id);
  expect(left).not.toContain(user.body.data.id);
});

test('every listed budget can be removed by root', async () => {
  const u = await keyedUser(gw);
  await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: u.keyId, period: 'daily', limit: 5 }, u.token);
  await gw.api('DELETE', `/api/token/${u.keyId}`, undefined, u.token);
  for (const id of await budgetIds()) {
    const r = await gw.api('DELETE', `/api/budget/${id}`);
    expect([id, r.status]).toEqual([id, 200]);
  }
  expect(await budgetIds()).toEqual([]);
});

test('a budget set racing the deletion of its key is refused or goes with the key, never left behind', async () => {
  const u = await keyedUser(gw);
  const keys: number[] = [];
  for (let i = 0; i < 30; i++) keys.push((await gw.api('POST', '/api/token/', { name: `k${i}` }, u.token)).body.data.id);
  const answers = await Promise.all(keys.flatMap((id) => [
    gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: id, period: 'daily', limit: 5 }, u.token),
    gw.api('DELETE', `/api/token/${id}`, undefined, u.token),
  ]));
  for (const r of answers) expect([200, 404]).toContain(r.status);
  for (const r of answers.filter((a) => a.status === 404)) expect(r.body.error.code).toBe('token_not_found');
  const left = (await gw.api('GET', '/api/budget/')).body.data as Array<{ subject_id: number; scope: string }>;
  expect(left.filter((b) => b.scope === 'key' && keys.includes(b.subject_id))).toEqual([]);
  expect((await gw.api('GET', '/api/budget/self', undefined, u.token)).body.data.budgets).toEqual([]);
});
