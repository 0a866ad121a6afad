/**
 * Regression pins of the management API's account boundaries that no other file states: a plain user's `/self`
 * listings ignore a `user_id` they do not declare, another user's access token is not theirs to revoke, and a role
 * taken away takes the rights with it on the credentials already held (read per request, on every node).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

test("GET /api/ledger/self?user_id=<another user> lists the caller's own entries only", async () => {
  const me = await makeUser(gw);
  const other = await makeUser(gw);
  for (const [userId, amount] of [[me.id, 7], [other.id, 900]] as const) {
    expect((await gw.api('POST', '/api/ledger/adjust', { user_id: userId, amount, note: 'pin' })).status).toBe(200);
  }
  const r = await gw.api('GET', `/api/ledger/self?user_id=${other.id}`, undefined, me.token);
  expect(r.status).toBe(200);
  expect(r.body.data.items.map((e: any) => [e.user_id, e.amount])).toEqual([[me.id, 7]]);
});

test("another user's access token id answers 404 token_not_found and that token keeps working", async () => {
  const me = await makeUser(gw);
  const victim = await makeUser(gw);
  const mine = await gw.api('GET', '/api/user/access_token', undefined, victim.token);
  const id = mine.body.data[0].id as number;
  const r = await gw.api('DELETE', `/api/user/access_token/${id}`, { current_password: me.password }, me.token);
  expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 404, code: 'token_not_found' });
  expect((await gw.api('GET', '/api/user/self', undefined, victim.token)).status).toBe(200);
});

test("an admin demoted to user loses admin routes at once, through the session and the token it already holds", async () => {
  const admin = await makeUser(gw, 10);
  const login = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: admin.username, password: admin.password }) });
  const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
  const viaCookie = () => fetch(`${gw.url}/api/user/`, { headers: { cookie } });
  expect((await viaCookie()).status).toBe(200);
  expect((await gw.api('GET', '/api/user/', undefined, admin.token)).status).toBe(200);
  expect((await gw.api('PUT', '/api/user/', { id: admin.id, role: 1 })).status).toBe(200);
  // Each node in turn (behind the round-robin proxy): none answers from a role it remembered.
  for (let i = 0; i < 3; i++) {
    expect((await viaCookie()).status).toBe(403);
    const r = await gw.api('GET', '/api/user/', undefined, admin.token);
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 403, code: 'insufficient_role' });
  }
  expect((await gw.api('GET', '/api/user/self', undefined, admin.token)).body.data.role).toBe(1);
});
