/**
 * Cookie tossing: another host under the gateway's parent domain (a sibling subdomain an attacker controls) can set
 * a `gw_session` cookie for the whole domain. The victim's browser then sends two: the attacker's first when it was
 * set with a longer Path. Reading only the first logged the victim in as the attacker's account (whatever they
 * did next, keys made, prompts sent, landed where the attacker reads), and a junk one logged the victim out.
 * Several different cookies are now each looked up: live sessions of different users are no session at all, a
 * junk or stale one beside the real one is ignored. Real gateway, real HTTP.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); }, 30_000);
afterAll(async () => { await gw.stop(); });

type User = Awaited<ReturnType<typeof makeUser>>;

/** A fresh login session's cookie value. */
async function sessionOf(u: User): Promise<string> {
  const r = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: u.username, password: u.password }) });
  expect(r.status).toBe(200);
  return r.headers.get('set-cookie')!.split(';')[0]!.slice('gw_session='.length);
}
const cookies = (...values: string[]) => values.map((v) => `gw_session=${v}`).join('; ');
const as = (cookie: string, method: string, path: string, body?: unknown) => gw.api(method, path, body, null, { cookie });
const keyCount = async (u: User) => (await gw.api('GET', '/api/token/', undefined, u.token)).body.data.total as number;

test("an attacker's own live session tossed before the victim's is not used: no session, nothing written to either account", async () => {
  const victim = await makeUser(gw);
  const attacker = await makeUser(gw);
  const [v, a] = [await sessionOf(victim), await sessionOf(attacker)];
  for (const order of [[a, v], [v, a]]) {
    const self = await as(cookies(...order), 'GET', '/api/user/self');
    expect([self.status, self.body.error?.code]).toEqual([401, 'ambiguous_session']);
    const made = await as(cookies(...order), 'POST', '/api/token/', { name: 'made-in-the-wrong-account' });
    expect(made.status).toBe(401);
  }
  expect([await keyCount(victim), await keyCount(attacker)]).toEqual([0, 0]);
  // Each alone still works.
  expect((await as(cookies(v), 'GET', '/api/user/self')).body.data.id).toBe(victim.id);
  expect((await as(cookies(a), 'GET', '/api/user/self')).body.data.id).toBe(attacker.id);
}, 30_000);

test('a junk or ended session cookie tossed before the real one does not log the victim out', async () => {
  const victim = await makeUser(gw);
  const v = await sessionOf(victim);
  const old = await sessionOf(victim);
  expect((await as(cookies(old), 'POST', '/api/user/logout')).status).toBe(200);
  const junk = 'A'.repeat(43);
  for (const tossed of [junk, old, 'not-a-session', '%zz']) {
    const r = await as(`gw_session=${tossed}; gw_session=${v}`, 'GET', '/api/user/self');
    expect({ tossed, status: r.status, id: r.body.data?.id }).toEqual({ tossed, status: 200, id: victim.id });
  }
  // Two live sessions of the same user are that user; a write through them works and lands in the victim's account.
  const v2 = await sessionOf(victim);
  expect((await as(cookies(v2, v), 'POST', '/api/token/', { name: 'mine' })).status).toBe(200);
  expect(await keyCount(victim)).toBe(1);
  // Only junk: the session has expired, as with one cookie.
  const none = await as(cookies(junk, 'B'.repeat(43)), 'GET', '/api/user/self');
  expect([none.status, none.body.error.code]).toEqual([401, 'session_expired']);
}, 30_000);

test('a header stuffed with many session-like cookies is refused as ambiguous (at most 4 are looked up)', async () => {
  const victim = await makeUser(gw);
  const v = await sessionOf(victim);
  const many = Array.from({ length: 200 }, (_, i) => `${String(i).padStart(3, '0')}${'x'.repeat(40)}`);
  const r = await as(cookies(...many, v), 'GET', '/api/user/self');
  expect([r.status, r.body.error.code]).toEqual([401, 'ambiguous_session']);
}, 30_000);
