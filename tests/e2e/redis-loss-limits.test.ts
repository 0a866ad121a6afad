/**
 * PostgreSQL mode: a loss of Redis's data (FLUSHALL, a restart of a Redis that keeps nothing on disk, a failover
 * to an empty replica) must not give an attacker fresh attempts. The lockouts and attempt counts of the account
 * flows lived in Redis, so a guesser who waited for (or caused) such a loss got a new budget: an unknown name's
 * lock was gone (while a real account, counted in its row, stayed locked: an oracle for which names exist), and so
 * were the per-address login and reset limits and a stolen session's day of 2FA guesses. Each is used up here,
 * then every key of the gateway's Redis prefix is deleted (the test's own prefix only: the server is shared), and
 * the next attempt must still be refused, by whichever node it reaches (GW_TEST_CLUSTER=3).
 * PostgreSQL only: SQLite mode has no Redis.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { generate } from 'otplib';
import { ON_PG, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { dropPrefix } from '../helpers/redis';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { setTrustProxy } from '../../apps/server/src/plugins/client-ip';

let gw: TestGateway;
beforeAll(async () => {
  if (!ON_PG) return;
  // Behind a trusted proxy, so each test is its own client address (the other nodes read TRUST_PROXY themselves).
  setTrustProxy(true);
  gw = await startGateway({
    TRUST_PROXY: 'true', LOGIN_MAX_FAILURES: '2', LOGIN_LOCK_SECONDS: '300', LOGIN_IP_PER_MINUTE: '4',
    RESET_IP_PER_MINUTE: '3', TOTP_MAX_FAILURES_PER_DAY: '3',
  });
}, 30_000);
afterAll(async () => {
  setTrustProxy(false);
  await gw?.stop();
});

/** Redis loses every key of this gateway; then past the second a node may answer a refusal from its memory. */
async function loseRedisData() {
  await dropPrefix(gw.services.config.redisPrefix);
  await Bun.sleep(1_100);
}

const login = (ip: string, username: string, password = 'wrong-password') =>
  gw.api('POST', '/api/user/login', { username, password }, null, { 'x-forwarded-for': ip });
const answer = (r: { status: number; body: any }) => [r.status, r.body?.error?.code];

test.skipIf(!ON_PG)('a locked username, unknown or real, stays locked, and both still answer alike', async () => {
  const real = await makeUser(gw);
  const ghost = `ghost-${crypto.randomUUID().slice(0, 8)}`;
  for (const [i, name] of [real.username, ghost].entries()) {
    expect(answer(await login(`198.51.100.${10 + i}`, name))).toEqual([401, 'invalid_credentials']);
    expect(answer(await login(`198.51.100.${20 + i}`, name))).toEqual([401, 'invalid_credentials']);
    expect(answer(await login(`198.51.100.${30 + i}`, name))).toEqual([429, 'account_locked']);
  }
  await loseRedisData();
  const after = [await login('198.51.100.40', real.username, real.password), await login('198.51.100.41', ghost)];
  expect(after.map(answer)).toEqual([[429, 'account_locked'], [429, 'account_locked']]);
  for (const r of after) expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(200);
}, 30_000);

test.skipIf(!ON_PG)('an address that used up its logins for the minute is still refused', async () => {
  await clearOfWindowEdge(15_000);
  const ip = '203.0.113.50';
  for (let i = 0; i < 4; i++) expect((await login(ip, `spray-${i}-${crypto.randomUUID().slice(0, 8)}`)).status).toBe(401);
  expect(answer(await login(ip, 'spray-next'))).toEqual([429, 'too_many_attempts']);
  await loseRedisData();
  const after = await login(ip, 'spray-after');
  expect(answer(after)).toEqual([429, 'too_many_attempts']);
  // Another address is not refused: the limit is the address's, not a blanket refusal.
  expect((await login('203.0.113.51', 'spray-other')).status).toBe(401);
}, 30_000);

test.skipIf(!ON_PG)('an address that used up its password-reset requests is still refused', async () => {
  await clearOfWindowEdge(15_000);
  const reset = (ip: string) => gw.api('POST', '/api/user/reset/request', { email: 'nobody@example.com' }, null, { 'x-forwarded-for': ip });
  const ip = '203.0.113.60';
  for (let i = 0; i < 3; i++) expect((await reset(ip)).status).toBe(200);
  expect(answer(await reset(ip))).toEqual([429, 'too_many_attempts']);
  await loseRedisData();
  expect(answer(await reset(ip))).toEqual([429, 'too_many_attempts']);
  expect((await reset('203.0.113.61')).status).toBe(200);
}, 30_000);

test.skipIf(!ON_PG)("a credential that used up its day of 2FA guesses gets no new day, even with a right backup code", async () => {
  const u = await makeUser(gw);
  const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
  const secret = setup.body.data.secret as string;
  await clearOfWindowEdge(3_000, 30_000);
  const code = await generate({ secret, epoch: Math.floor(Date.now() / 1000) - 30 });
  const en = await gw.api('POST', '/api/user/2fa/enable', { code, current_password: u.password }, u.token);
  expect(en.status).toBe(200);
  const backup = en.body.data.backup_codes as string[];
  // The day window is aligned to the clock: the guesses and the checks after them stay inside one, with more than the
  // 60 s of retry-after checked below still left of it when the last check is made.
  await clearOfWindowEdge(90_000, 86_400_000);
  const disable = (c: string) => gw.api('POST', '/api/user/2fa/disable', { code: c }, u.token);
  for (let i = 0; i < 3; i++) expect(answer(await disable(`00000${i}`))).toEqual([400, 'invalid_totp']);
  expect(answer(await disable('000009'))).toEqual([429, 'too_many_attempts']);
  await loseRedisData();
  const after = await disable(backup[0]!);
  expect(answer(after)).toEqual([429, 'too_many_attempts']);
  expect(Number(after.headers.get('retry-after'))).toBeGreaterThan(60);
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.enabled).toBe(true);
}, 150_000); // the day edge's wait (up to 90 s) and the run
