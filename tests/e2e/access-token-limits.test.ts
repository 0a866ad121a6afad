/**
 * Management access tokens a user can mint (POST /api/user/access_token): a bounded number alive at once, refused
 * before the slow password check, race-free; and the listing stays bounded however many ended tokens pile up.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';

const MAX = 50;
let gw: TestGateway;
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); });

const now = () => Math.floor(Date.now() / 1000);
/** Live tokens put straight into the table (minting each through the API costs a password check). */
async function seedTokens(userId: number, n: number, ended: 'live' | 'revoked' | 'expired' = 'live') {
  for (let i = 0; i < n; i++) {
    const t = now();
    await gw.db.all('insert into access_tokens (user_id, name, token_hash, prefix, created_at, expires_at, revoked_at) values (?, ?, ?, ?, ?, ?, ?)',
      userId, `${ended}-${i}`, `${ended}-${userId}-${i}-${crypto.randomUUID()}`, 'gwm_seed00', t, ended === 'expired' ? t - 1 : null, ended === 'revoked' ? t : null);
  }
}

test(`a user holds at most ${MAX} live access tokens: the next is 409 before any password check; ended ones do not count`, async () => {
  const u = await makeUser(gw);
  await seedTokens(u.id, MAX - 1);
  await seedTokens(u.id, 5, 'revoked');
  await seedTokens(u.id, 5, 'expired');
  const mint = (password = u.password) => gw.api('POST', '/api/user/access_token', { name: 'ci', current_password: password }, u.token);
  // The test's own login token (makeUser) is one of the user's live tokens: MAX - 1 seeded + 1 = MAX.
  const full = await mint();
  expect(full.status).toBe(409);
  expect(full.body.error).toMatchObject({ code: 'too_many_access_tokens' });
  // Refused before the password is checked: a wrong one is the same 409, and uses none of the 5 checks.
  for (let i = 0; i < 7; i++) expect((await mint('wrong-password')).body.error.code).toBe('too_many_access_tokens');
  // Revoking one makes room for exactly one.
  const list = await gw.api('GET', '/api/user/access_token', undefined, u.token);
  const seeded = list.body.data.find((t: any) => t.name === 'live-0');
  expect((await gw.api('DELETE', `/api/user/access_token/${seeded.id}`, { current_password: u.password }, u.token)).status).toBe(200);
  const ok = await mint();
  expect(ok.status).toBe(200);
  expect(ok.body.data.token).toStartWith('gwm_');
  expect((await mint()).status).toBe(409);
}, 30_000);

test('concurrent mints at the edge: exactly the room left is created', async () => {
  const u = await makeUser(gw);
  await seedTokens(u.id, MAX - 3); // + the login token: room for 2
  const results = await Promise.all(Array.from({ length: 6 }, () => gw.api('POST', '/api/user/access_token', { name: 'race', current_password: u.password }, u.token)));
  expect(results.filter((r) => r.status === 200)).toHaveLength(2);
  expect(results.filter((r) => r.status === 409).every((r) => r.body.error.code === 'too_many_access_tokens')).toBe(true);
  const live = await gw.db.get('select count(*) n from access_tokens where user_id = ? and revoked_at is null', u.id);
  expect(Number(live.n)).toBe(MAX);
}, 30_000);

test(`the listing shows every live token and the ${MAX} most recently ended, however many ended`, async () => {
  const u = await makeUser(gw);
  await seedTokens(u.id, 3);
  await seedTokens(u.id, 400, 'revoked');
  await seedTokens(u.id, 2);
  const list = (await gw.api('GET', '/api/user/access_token', undefined, u.token)).body.data as any[];
  expect(list.filter((t) => !t.revoked && (t.expires_at === null || t.expires_at > now()))).toHaveLength(6);
  expect(list.filter((t) => t.revoked)).toHaveLength(MAX);
  expect(list).toHaveLength(6 + MAX);
  // The ended ones shown are the newest: revoked-399 down to revoked-350.
  expect(list.filter((t) => t.revoked).map((t) => t.name)).toContain('revoked-399');
  expect(list.filter((t) => t.revoked).map((t) => t.name)).not.toContain('revoked-349');
}, 60_000);
