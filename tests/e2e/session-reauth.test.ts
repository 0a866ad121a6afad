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

const sessionId = async (cookie: string, userAgent: string) =>
  ((await withCookie('GET', '/api/user/session', cookie)).body.data as any[]).find((r) => r.user_agent === userAgent).id as string;

test('a stolen session cannot end the owner\'s other sessions without the password', async () => {
  const u = await makeUser(gw);
  const owner = await login(u.username, u.password, 'owner');
  const thief = await login(u.username, u.password, 'thief');
  const ownerId = await sessionId(thief, 'owner');

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
}, 20_000);

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
}, 20_000);

test('a stolen session or access token cannot revoke the owner\'s other access tokens without the password; its own, yes', async () => {
  const u = await makeUser(gw);
  const script = await gw.services.auth.createAccessToken(u.id, 'owner-script');
  const stolenToken = await gw.services.auth.createAccessToken(u.id, 'stolen');
  const thief = await login(u.username, u.password, 'thief');

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
}, 20_000);

test('a cookie stolen from a browser that just logged in is no proof of the password: it ends and revokes nothing without it', async () => {
  const u = await makeUser(gw);
  const owner = await login(u.username, u.password, 'owner');
  const script = await gw.services.auth.createAccessToken(u.id, 'script');
  // The thief's copy is seconds old, as fresh as any login can be.
  const stolen = await login(u.username, u.password, 'stolen');
  const ownerId = await sessionId(stolen, 'owner');
  const refusals = [
    await withCookie('POST', '/api/user/session/end_others', stolen),
    await withCookie('DELETE', `/api/user/session/${ownerId}`, stolen),
    await withCookie('DELETE', `/api/user/access_token/${script.view.id}`, stolen),
    await withCookie('POST', '/api/user/access_token/revoke', stolen, { ids: [script.view.id] }),
  ];
  expect(refusals.map((r) => [r.status, r.body.error?.code])).toEqual(Array(4).fill([400, 'invalid_current_password']));
  expect((await withCookie('GET', '/api/user/self', owner)).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, script.token)).status).toBe(200);
  // With the password, the same fresh session may.
  const r = await withCookie('POST', '/api/user/session/end_others', stolen, { current_password: u.password });
  expect([r.status, r.body.data]).toEqual([200, { sessions_ended: 1 }]);
  expect((await withCookie('GET', '/api/user/self', owner)).status).toBe(401);
}, 20_000);

test('several access tokens are revoked on one password check; an id not the caller\'s token revokes none', async () => {
  const u = await makeUser(gw);
  const other = await makeUser(gw);
  const mine = await Promise.all([1, 2, 3].map((i) => gw.services.auth.createAccessToken(u.id, `gw-cli@old ${i}`)));
  const theirs = await gw.services.auth.createAccessToken(other.id, 'theirs');
  const caller = await login(u.username, u.password, 'caller');
  const ids = mine.map((t) => t.view.id);
  const alive = async () => (await Promise.all(mine.map((t) => gw.api('GET', '/api/user/self', undefined, t.token)))).map((r) => r.status);

  const wrong = await withCookie('POST', '/api/user/access_token/revoke', caller, { ids, current_password: 'wrong-guess' });
  expect([wrong.status, wrong.body.error?.code]).toEqual([400, 'invalid_current_password']);
  for (const bad of [[...ids, theirs.view.id], [...ids, 999_999]]) {
    const r = await withCookie('POST', '/api/user/access_token/revoke', caller, { ids: bad, current_password: u.password });
    expect([r.status, r.body.error?.code, r.body.error?.param]).toEqual([404, 'token_not_found', 'ids']);
  }
  expect(await alive()).toEqual([200, 200, 200]);
  expect((await gw.api('GET', '/api/user/self', undefined, theirs.token)).status).toBe(200);

  const r = await withCookie('POST', '/api/user/access_token/revoke', caller, { ids: [...ids, ids[0]], current_password: u.password });
  expect([r.status, r.body.data]).toEqual([200, { tokens_revoked: 3 }]);
  expect(await alive()).toEqual([401, 401, 401]);
  // Already revoked: done, not an error, and nothing is counted (or rewritten) again.
  const again = await withCookie('POST', '/api/user/access_token/revoke', caller, { ids: [ids[0]], current_password: u.password });
  expect([again.status, again.body.data]).toEqual([200, { tokens_revoked: 0 }]);
}, 20_000);

const revokeBatch = (cookie: string, ids: number[], password: string) =>
  withCookie('POST', '/api/user/access_token/revoke', cookie, { ids, current_password: password });

test('two logins revoking the same idle tokens at once both succeed; each token is counted by one of them', async () => {
  const u = await makeUser(gw);
  const idle = await Promise.all([1, 2, 3, 4].map((i) => gw.services.auth.createAccessToken(u.id, `gw-cli@ci ${i}`)));
  const ids = idle.map((t) => t.view.id);
  const [a, b] = await Promise.all([login(u.username, u.password, 'ci-a'), login(u.username, u.password, 'ci-b')]);
  // Both listed the same four; the later batch finds them ended by the earlier one.
  const [ra, rb] = await Promise.all([revokeBatch(a, ids, u.password), revokeBatch(b, ids, u.password)]);
  expect([ra.status, rb.status]).toEqual([200, 200]);
  expect(ra.body.data.tokens_revoked + rb.body.data.tokens_revoked).toBe(4);
  const late = await revokeBatch(a, [...ids].reverse(), u.password);
  expect([late.status, late.body.data]).toEqual([200, { tokens_revoked: 0 }]);
  expect((await Promise.all(idle.map((t) => gw.api('GET', '/api/user/self', undefined, t.token)))).map((r) => r.status)).toEqual([401, 401, 401, 401]);
}, 20_000);

test('a token that expired between listing and revoking is done, not a 404; the live ones in the batch are revoked', async () => {
  const u = await makeUser(gw);
  const expiring = await gw.services.auth.createAccessToken(u.id, 'gw-cli@ci expiring', 1);
  const live = await gw.services.auth.createAccessToken(u.id, 'gw-cli@ci live');
  // It expired a second ago by the server's clock (a client whose clock is behind still thinks it live).
  await gw.db.all('update access_tokens set expires_at = ? where id = ?', Math.floor(Date.now() / 1000) - 1, expiring.view.id);
  const caller = await login(u.username, u.password, 'ci');
  const r = await revokeBatch(caller, [expiring.view.id, live.view.id], u.password);
  expect([r.status, r.body.data]).toEqual([200, { tokens_revoked: 1 }]);
  expect((await gw.api('GET', '/api/user/self', undefined, live.token)).status).toBe(401);
  // The expired one keeps its own end: a revocation is not written over an expiry.
  expect(await gw.db.get('select revoked_at from access_tokens where id = ?', expiring.view.id)).toEqual({ revoked_at: null });
}, 20_000);

test('an id never the caller\'s is 404 whatever else the batch holds, the same answer for another user\'s and an unknown id; nothing is revoked', async () => {
  const u = await makeUser(gw);
  const other = await makeUser(gw);
  const [ended, kept] = await Promise.all([1, 2].map((i) => gw.services.auth.createAccessToken(u.id, `gw-cli@ci ${i}`)));
  await gw.services.auth.revokeAccessToken(u.id, ended!.view.id);
  const theirs = await gw.services.auth.createAccessToken(other.id, 'theirs');
  const unknown = theirs.view.id + 1_000_000;
  const caller = await login(u.username, u.password, 'ci');
  const answers = [];
  for (const foreign of [theirs.view.id, unknown]) {
    const r = await revokeBatch(caller, [ended!.view.id, kept!.view.id, foreign], u.password);
    expect([r.status, r.body.error?.code, r.body.error?.param]).toEqual([404, 'token_not_found', 'ids']);
    // It names the id at fault, not the caller's own ended token.
    expect(r.body.error.message).toMatch(new RegExp(`\\b${foreign}\\b`));
    answers.push(JSON.stringify(r.body.error).replaceAll(String(foreign), '<id>'));
  }
  expect(answers[0]).toBe(answers[1]!);
  expect((await gw.api('GET', '/api/user/self', undefined, kept!.token)).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, theirs.token)).status).toBe(200);
}, 20_000);
