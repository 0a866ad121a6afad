import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

async function sessionCookie(username: string, password: string): Promise<string> {
  const res = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
  expect(res.status).toBe(200);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

const selfStatus = async (cookie: string) => (await fetch(`${gw.url}/api/user/self`, { headers: { cookie } })).status;

const change = (cookieOrToken: { cookie?: string; token?: string }, body: unknown) =>
  gw.api('POST', '/api/user/password', body, cookieOrToken.token ?? null, cookieOrToken.cookie ? { cookie: cookieOrToken.cookie } : {});

describe('POST /api/user/password', () => {
  test('through a session: keeps the calling session, ends the other sessions and revokes every access token', async () => {
    const u = await makeUser(gw);
    const a = await sessionCookie(u.username, u.password);
    const b = await sessionCookie(u.username, u.password);
    const extra = (await gw.services.auth.createAccessToken(u.id, 'laptop')).token;
    const r = await change({ cookie: a }, { current_password: u.password, new_password: 'changed-pass-123' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ success: true, message: '', data: { sessions_ended: 1, tokens_revoked: 2 } });
    expect(await selfStatus(a)).toBe(200);
    expect(await selfStatus(b)).toBe(401);
    for (const t of [u.token, extra]) expect((await gw.api('GET', '/api/user/self', undefined, t)).status).toBe(401);
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: u.password }, null)).status).toBe(401);
    await sessionCookie(u.username, 'changed-pass-123');
  });

  test('through an access token: every session ends and every other token is revoked; the calling token keeps working', async () => {
    const u = await makeUser(gw);
    const a = await sessionCookie(u.username, u.password);
    const intruder = (await gw.services.auth.createAccessToken(u.id, 'stolen')).token;
    const r = await change({ token: u.token }, { current_password: u.password, new_password: 'changed-pass-123' });
    expect(r.body.data).toEqual({ sessions_ended: 1, tokens_revoked: 1 });
    expect(await selfStatus(a)).toBe(401);
    expect((await gw.api('GET', '/api/user/self', undefined, intruder)).status).toBe(401);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).status).toBe(200);
    // The revocation is visible in the token list, and counts nothing twice on a second change.
    const list = await gw.api('GET', '/api/user/access_token', undefined, u.token);
    expect(list.body.data.filter((t: any) => t.revoked).length).toBe(1);
    const again = await change({ token: u.token }, { current_password: 'changed-pass-123', new_password: 'changed-pass-456' });
    expect(again.body.data).toEqual({ sessions_ended: 0, tokens_revoked: 0 });
  });

  test('wrong current password, bad new length, no caller', async () => {
    const u = await makeUser(gw);
    const wrong = await change({ token: u.token }, { current_password: 'not-my-password', new_password: 'changed-pass-123' });
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' });
    const short = await change({ token: u.token }, { current_password: u.password, new_password: 'short' });
    expect(short.status).toBe(400);
    expect(short.body.error).toMatchObject({ code: 'invalid_password', param: 'new_password' });
    expect((await change({}, { current_password: u.password, new_password: 'changed-pass-123' })).status).toBe(401);
    // Nothing changed.
    await sessionCookie(u.username, u.password);
  });

  test('repeated wrong current passwords are limited', async () => {
    const u = await makeUser(gw);
    // Failures count in a five-minute window aligned to the clock (see window-edge.ts).
    await clearOfWindowEdge(10_000, 300_000);
    for (let i = 0; i < 5; i++) expect((await change({ token: u.token }, { current_password: `guess-${i}-xxxx`, new_password: 'changed-pass-123' })).status).toBe(400);
    const r = await change({ token: u.token }, { current_password: u.password, new_password: 'changed-pass-123' });
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('too_many_attempts');
  }, 30_000);
});
