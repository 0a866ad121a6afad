/**
 * A user's login sessions can be listed and ended: one opened by someone else (a leaked cookie, a shared
 * machine) is seen with where it logged in from, and ended at once, alone or with every other one, without
 * changing the password. Over real HTTP, on either backend (the session table is read on every request, so
 * an ended session is refused on every node).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { callWithCookie, loginCookie } from '../helpers/cookie-session';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const login = (username: string, password: string, userAgent: string) => loginCookie(gw, username, password, userAgent);
const withCookie = (method: string, path: string, cookie: string, body?: unknown) => callWithCookie(gw, method, path, cookie, body);

test('the list shows every live session of the caller, newest first, with where it logged in and which one is asking; never the cookie', async () => {
  const u = await makeUser(gw);
  const other = await makeUser(gw);
  const a = await login(u.username, u.password, 'browser-a');
  const b = await login(u.username, u.password, 'browser-b');
  await login(other.username, other.password, 'someone-else');
  const list = await withCookie('GET', '/api/user/session', b);
  expect(list.status).toBe(200);
  // Newest first by login second: these two share one, so only the set and the flags are fixed.
  const rows = (list.body.data as any[]).sort((x, y) => x.user_agent.localeCompare(y.user_agent));
  expect(rows.map((r) => [r.user_agent, r.current])).toEqual([['browser-a', false], ['browser-b', true]]);
  for (const r of rows) {
    expect(r.id).toMatch(/^[0-9a-f]{16}$/);
    expect(r.ip).toBe('127.0.0.1');
    expect(r.expires_at).toBeGreaterThan(r.created_at);
  }
  // Neither cookie value appears in the answer (the id is a prefix of its hash, not of the cookie).
  for (const c of [a, b]) expect(JSON.stringify(list.body)).not.toContain(c.split('=')[1]!);
  // An access token lists them too, none of them current.
  expect((await gw.api('GET', '/api/user/session', undefined, u.token)).body.data.map((r: any) => r.current)).toEqual([false, false]);
});

test('ending one session refuses it at once; another user cannot end it; a malformed id is a 400', async () => {
  const u = await makeUser(gw);
  const other = await makeUser(gw);
  const keep = await login(u.username, u.password, 'mine');
  const stolen = await login(u.username, u.password, 'not-mine');
  const id = ((await withCookie('GET', '/api/user/session', keep)).body.data as any[]).find((r) => r.user_agent === 'not-mine').id;
  // Another user (by session or token) cannot end it, nor learn that it exists: the same 404 as an unknown id.
  const theirs = await gw.api('DELETE', `/api/user/session/${id}`, { current_password: other.password }, other.token);
  expect(theirs.status).toBe(404);
  expect(theirs.body.error.code).toBe('session_not_found');
  const unknown = await gw.api('DELETE', '/api/user/session/0123456789abcdef', { current_password: other.password }, other.token);
  expect([unknown.status, unknown.body.error.code]).toEqual([404, 'session_not_found']);
  expect((await withCookie('GET', '/api/user/self', stolen)).status).toBe(200);
  const bad = await gw.api('DELETE', '/api/user/session/not-an-id', undefined, u.token);
  expect(bad.status).toBe(400);
  expect(bad.body.error.param).toBe('id');

  const ended = await withCookie('DELETE', `/api/user/session/${id}`, keep, { current_password: u.password });
  expect(ended.status).toBe(200);
  expect((await withCookie('GET', '/api/user/self', stolen)).status).toBe(401);
  expect((await withCookie('GET', '/api/user/self', keep)).status).toBe(200);
  expect((await withCookie('DELETE', `/api/user/session/${id}`, keep, { current_password: u.password })).status).toBe(404);
});

test('"log out everywhere else" ends every other session and keeps the caller\'s; with an access token it ends all; tokens stay', async () => {
  const u = await makeUser(gw);
  const mine = await login(u.username, u.password, 'mine');
  const others = [await login(u.username, u.password, 'x'), await login(u.username, u.password, 'y')];
  const r = await withCookie('POST', '/api/user/session/end_others', mine, { current_password: u.password });
  expect(r.status).toBe(200);
  expect(r.body.data).toEqual({ sessions_ended: 2 });
  for (const c of others) expect((await withCookie('GET', '/api/user/self', c)).status).toBe(401);
  expect((await withCookie('GET', '/api/user/self', mine)).status).toBe(200);

  const t = await gw.api('POST', '/api/user/session/end_others', { current_password: u.password }, u.token);
  expect(t.body.data).toEqual({ sessions_ended: 1 });
  expect((await withCookie('GET', '/api/user/self', mine)).status).toBe(401);
  // The access token that asked is untouched.
  expect((await gw.api('GET', '/api/user/self', undefined, u.token)).status).toBe(200);
});

test('logout ends the credential that made the call: with an access token, that token (only it) stops working', async () => {
  const u = await makeUser(gw);
  const second = (await gw.services.auth.createAccessToken(u.id, 'second')).token;
  const cookie = await login(u.username, u.password, 'browser-a');
  expect((await gw.api('GET', '/api/user/self', undefined, u.token)).status).toBe(200);
  const out = await gw.api('POST', '/api/user/logout', undefined, u.token);
  expect(out.status).toBe(200);
  const after = await gw.api('GET', '/api/user/self', undefined, u.token);
  expect([after.status, after.body.error.type]).toEqual([401, 'authentication_error']);
  // A second logout with it is a 401 like any other call: the script sees it is already out.
  expect((await gw.api('POST', '/api/user/logout', undefined, u.token)).status).toBe(401);
  // The caller's other credentials stay: another token, and the browser session.
  expect((await gw.api('GET', '/api/user/self', undefined, second)).status).toBe(200);
  expect((await withCookie('GET', '/api/user/self', cookie)).status).toBe(200);
  const listed = await gw.api('GET', '/api/user/access_token', undefined, second);
  expect((listed.body.data as any[]).filter((t) => t.revoked).map((t) => t.name)).toEqual(['test']);
  // A cookie logout ends that session only; the token used above stays revoked, the second one works.
  expect((await withCookie('POST', '/api/user/logout', cookie)).status).toBe(200);
  expect((await withCookie('GET', '/api/user/self', cookie)).status).toBe(401);
  expect((await gw.api('GET', '/api/user/self', undefined, second)).status).toBe(200);
});

test('the list stays bounded however many sessions a user opened: the 100 newest, and always the one asking', async () => {
  const u = await makeUser(gw);
  const mine = await login(u.username, u.password, 'the-one-asking');
  // 300 newer sessions (logins are limited per address, not per user: a script with many addresses gets there).
  const t = Math.floor(Date.now() / 1000);
  for (let i = 0; i < 300; i++) {
    await gw.db.all('insert into sessions (id_hash, user_id, created_at, expires_at, ip, user_agent) values (?, ?, ?, ?, ?, ?)',
      `seed-${u.id}-${i}-${crypto.randomUUID()}`, u.id, t + 10 + i, t + 86_400, '10.0.0.1', `seeded-${i}`);
  }
  const list = await withCookie('GET', '/api/user/session', mine);
  expect(list.status).toBe(200);
  const rows = list.body.data as any[];
  expect(rows).toHaveLength(101);
  expect(rows.slice(0, 100).map((r) => r.user_agent)).toEqual(Array.from({ length: 100 }, (_, i) => `seeded-${299 - i}`));
  expect(rows[100]).toMatchObject({ user_agent: 'the-one-asking', current: true });
  // Every one of them still ends with "log out everywhere else".
  const ended = await withCookie('POST', '/api/user/session/end_others', mine, { current_password: u.password });
  expect(ended.body.data).toMatchObject({ sessions_ended: 300 });
}, 30_000);
