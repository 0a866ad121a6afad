/**
 * Attack on the budget routes by a plain user with a login: read or change another user's budgets,
 * key budgets, low-balance threshold and the alert outbox (whose payloads name users, keys and spend).
 * Everything here must be refused and change nothing; the caller's own views must not include others.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser } from '../e2e/relay-setup';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); }, 30_000);

test('a user cannot read, set or clear what belongs to another user, nor read the outbox', async () => {
  const me = await keyedUser(gw);
  const victim = await keyedUser(gw);
  const keyBudget = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: victim.keyId, period: 'daily', limit: 50 }, victim.token);
  expect(keyBudget.status).toBe(200);
  const userBudget = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: victim.id, period: 'monthly', limit: 500 });
  expect(userBudget.status).toBe(200);
  expect((await gw.api('PUT', '/api/budget/low_balance', { user_id: victim.id, threshold: 7 })).status).toBe(200);

  // Admin-only routes are 403; naming another user's key, account or budget is the unknown-id 404 (no existence oracle).
  const refused = async (method: string, path: string, body?: unknown, status = 403) => {
    const r = await gw.api(method, path, body, me.token);
    expect([method, path, r.status]).toEqual([method, path, status]);
  };
  await refused('GET', '/api/budget/');
  await refused('GET', `/api/budget/?scope=key&subject_id=${victim.keyId}`);
  await refused('GET', `/api/budget/user/${victim.id}`);
  await refused('GET', '/api/budget/alerts');
  await refused('PUT', '/api/budget/', { scope: 'key', subject_id: victim.keyId, period: 'daily', limit: 1_000_000 }, 404);
  await refused('PUT', '/api/budget/', { scope: 'user', subject_id: victim.id, period: 'monthly', limit: 1_000_000 }, 404);
  await refused('DELETE', `/api/budget/${keyBudget.body.data.id}`, undefined, 404);
  await refused('DELETE', `/api/budget/${userBudget.body.data.id}`, undefined, 404);
  await refused('PUT', '/api/budget/low_balance', { user_id: victim.id, threshold: 0 }, 404);
  // A user cannot clear an admin-set user budget on themselves either.
  const mine = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: me.id, period: 'daily', limit: 5 });
  await refused('DELETE', `/api/budget/${mine.body.data.id}`);

  const own = await gw.api('GET', '/api/budget/self', undefined, me.token);
  expect(own.body.data.budgets.map((b: any) => b.user_id)).toEqual([me.id]);
  const theirs = await gw.api('GET', `/api/budget/user/${victim.id}`);
  expect(theirs.body.data.budgets.map((b: any) => [b.scope, b.limit]).sort()).toEqual([['key', 50], ['user', 500]]);
  expect(theirs.body.data.low_balance_threshold).toBe(7);
}, 30_000);

test('an admin cannot manage budgets of a user with a role equal to or above their own', async () => {
  const admin = await makeUser(gw, 10);
  const peer = await keyedUser(gw);
  await gw.api('PUT', `/api/user/`, { id: peer.id, role: 10 });
  const r = await gw.api('PUT', '/api/budget/', { scope: 'user', subject_id: peer.id, period: 'daily', limit: 5 }, admin.token);
  expect([r.status, r.body.error.code]).toEqual([403, 'role_too_high']);
  // A key above the admin is hidden like an unknown one (as GET /api/token/:id answers it): no existence oracle.
  const k = await gw.api('PUT', '/api/budget/', { scope: 'key', subject_id: peer.keyId, period: 'daily', limit: 5 }, admin.token);
  expect([k.status, k.body.error.code]).toEqual([404, 'token_not_found']);
}, 30_000);
