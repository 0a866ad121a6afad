/**
 * A stolen login session (or access token) must not end the owner's other sessions or revoke the owner's
 * access tokens: that locks the owner out of the browser and breaks their scripts while the thief stays in.
 * Ending another credential needs the current password; ending the credential that calls stays free (logout).
 * Over real HTTP, on either backend.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { callWithCookie, loginCookie } from '../helpers/cookie-session';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const login = (username: string, password: string, userAgent: string) => loginCookie(gw, username, password, userAgent);
const withCookie = (method: string, path: string, cookie: string, body?: unknown) => callWithCookie(gw, method, path, cookie, body);

/** Logged in RECENT_LOGIN_SECONDS and more ago: no longer a recent proof of the password (a cookie stolen later). */
const age = (userId: number) => gw.db.all('update sessions set created_at = created_at - 600 where user_id = ?', userId);

const sessionId = async (cookie: string, userAgent: string) =>
  ((await withCookie('GET', '/api/user/session', cookie)).body.data as any[]).find((r) => r.user_agent === userAgent).id as string;

test('a stolen session cannot end the owner\'s other sessions without the password', async () => {
  const u = await makeUser(gw);
  const owner = await login(u.username, u.password, 'owner');
  const thief = await login(u.username, u.password, 'thief');
  const ownerId = await sessionId(thief, 'owner');
  await age(u.id);

  // A missing password costs none of the owner's five checks; two wrong guesses here, two below.
  for (const body of [undefined, {}, { current_password: '' }, { current_password: 'wrong-guess' }]) {
    const one = await withCookie('DELETE', `/api/user/session/${ownerId}`, thief, body);
    expect([one.status, one.body.error?.code, one.body.error?.param]).toEqual([400, 'invalid_current_password', 'current_password']);
    const all = await withCookie('POST', '/api/user/session/end_others', thief, body);
    expect([all.status, all.body.error?.code]).toEqual([400, 'invalid_current_password']);
  }
  expect((await withCookie('GET', '/api/user/self', owner)).status).toBe(200);

  // The owner, with the password, ends the thief's session; ending one's own session needs nothing.
  const thiefId = await sessionId(owner, 'thief');
  expect((await withCookie('DELETE', `/api/user/session/${thiefId}`, owner, { current_password: u.password })).status).toBe(200);
  expect((await withCookie('GET', '/api/user/self', thief)).status).toBe(401);
  const own = await withCookie('DELETE', `/api/user/session/${await sessionId(owner, 'owner')}`, owner);
  expect(own.status).toBe(200);
  expect((await withCookie('GET', '/api/user/self', owner)).status).toBe(401);
});

test('"log out everywhere else" works with the password, from a session or an access token', async () => {
  const u = await makeUser(gw);
  const mine = await login(u.username, u.password, 'mine');
  const other = await login(u.username, u.password, 'other');
  const r = await withCookie('POST', '/api/user/session/end_others', mine, { current_password: u.password });
  expect([r.status, r.body.data]).toEqual([200, { sessions_ended: 1 }]);
  expect((await withCookie('GET', '/api/user/self', other)).status).toBe(401);
  const t = await gw.api('POST', '/api/user/session/end_others', { current_password: u.password }, u.token);
  expect(t.body.data).toEqual({ sessions_ended: 1 });
  expect((await withCookie('GET', '/api/user/self', mine)).status).toBe(401);
});

test('a stolen session or access token cannot revoke the owner\'s other access tokens without the password; its own, yes', async () => {
  const u = await makeUser(gw);
  const script = await gw.services.auth.createAccessToken(u.id, 'owner-script');
  const stolenToken = await gw.services.auth.createAccessToken(u.id, 'stolen');
  const thief = await login(u.username, u.password, 'thief');
  await age(u.id);

  for (const body of [undefined, { current_password: 'wrong-guess' }]) {
    const bySession = await withCookie('DELETE', `/api/user/access_token/${script.view.id}`, thief, body);
    expect([bySession.status, bySession.body.error?.code]).toEqual([400, 'invalid_current_password']);
    const byToken = await gw.api('DELETE', `/api/user/access_token/${script.view.id}`, body, stolenToken.token);
    expect([byToken.status, byToken.body.error?.code]).toEqual([400, 'invalid_current_password']);
  }
  expect((await gw.api('GET', '/api/user/self', undefined, script.token)).status).toBe(200);

  // A token may revoke itself (like logout); with the password, any of the caller's.
  expect((await gw.api('DELETE', `/api/user/access_token/${stolenToken.view.id}`, undefined, stolenToken.token)).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, stolenToken.token)).status).toBe(401);
  expect((await withCookie('DELETE', `/api/user/access_token/${script.view.id}`, thief, { current_password: u.password })).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, script.token)).status).toBe(401);
});

test('a login of the last five minutes is a recent proof of the password: it ends and revokes without it; a token never is', async () => {
  const u = await makeUser(gw);
  const old = await login(u.username, u.password, 'old');
  await age(u.id);
  const script = await gw.services.auth.createAccessToken(u.id, 'script');
  const fresh = await login(u.username, u.password, 'fresh');
  // A wrong password given is still wrong, fresh or not.
  expect((await withCookie('POST', '/api/user/session/end_others', fresh, { current_password: 'wrong-guess' })).status).toBe(400);
  expect((await withCookie('DELETE', `/api/user/access_token/${script.view.id}`, fresh)).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, script.token)).status).toBe(401);
  const r = await withCookie('POST', '/api/user/session/end_others', fresh);
  expect([r.status, r.body.data]).toEqual([200, { sessions_ended: 1 }]);
  expect((await withCookie('GET', '/api/user/self', old)).status).toBe(401);
  // An access token, however new, is not a login.
  const again = await login(u.username, u.password, 'again');
  const t = await gw.api('POST', '/api/user/session/end_others', undefined, u.token);
  expect([t.status, t.body.error?.code]).toEqual([400, 'invalid_current_password']);
  expect((await withCookie('GET', '/api/user/self', again)).status).toBe(200);
});
