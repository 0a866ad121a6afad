/**
 * A stolen session (or access token) has no password, but `POST /api/user/2fa/disable` takes a code alone. Ten
 * checks per five minutes, forever, let it try ~86,000 codes a month against ~3 valid ones per check. The checks
 * are also capped per day and per 30 days (here TOTP_MAX_FAILURES_PER_DAY=4), the owner is mailed once when the
 * limit stops the guessing. The counts are the calling credential's: the owner's own sessions and tokens, and a new
 * login with the password and a code, are not locked by the thief's guessing, and no login of the owner's gives the
 * stolen session new guesses.
 * Over real HTTP, against a real SMTP server, on every backend.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { generate } from 'otplib';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startSmtp, type TestSmtp } from '../helpers/smtp';
import { clearOfWindowEdge } from '../helpers/window-edge';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, SECURITY_NOTICE_WINDOW_SECONDS: '1', TOTP_MAX_FAILURES_PER_DAY: '4' });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

const totp = (secret: string, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });
const GUESSING = 'Security notice: Wrong two-factor codes were tried';

async function ownerWith2fa() {
  const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = { ...(await makeUser(gw, 1, { email })), email };
  const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
  const secret = setup.body.data.secret as string;
  // The previous step's code, sent clear of a step's end (the server checks the password first).
  await clearOfWindowEdge(3_000, 30_000);
  const en = await gw.api('POST', '/api/user/2fa/enable', { code: await totp(secret, -1), current_password: u.password }, u.token);
  expect(en.status).toBe(200);
  return { ...u, secret, backup: en.body.data.backup_codes as string[] };
}

async function login(username: string, password: string, totp_code?: string) {
  const res = await fetch(`${gw.url}/api/user/login`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'user-agent': 'thief/1.0' },
    body: JSON.stringify({ username, password, ...(totp_code ? { totp_code } : {}) }),
  });
  return { status: res.status, cookie: res.headers.get('set-cookie')?.split(';')[0] ?? '', body: (await res.json()) as any };
}

const disable = (cookie: string, code: string) => gw.api('POST', '/api/user/2fa/disable', { code }, null, { cookie, 'user-agent': 'thief/1.0' });
const guessingMails = (to: string) => smtp.messages.filter((m) => m.to.includes(to) && m.subject.startsWith(GUESSING));

test('a stolen session is stopped by the day cap, not only for five minutes; the owner is mailed once', async () => {
  const owner = await ownerWith2fa();
  // The thief's copy of a session the owner opened with both factors.
  const stolen = (await login(owner.username, owner.password, await totp(owner.secret, 0))).cookie;
  expect(stolen).toStartWith('gw_session=');
  // The day window is aligned to the clock like the others: keep the burst inside one of them, and out of the day's
  // last 5 minutes, where the 5-minute window ends at midnight too and no retry-after can tell the two apart.
  await clearOfWindowEdge(360_000, 86_400_000);
  // Past the notice window of "2FA turned on", so the next notice is a mail of its own.
  await Bun.sleep(1_200);
  for (let i = 0; i < 4; i++) expect((await disable(stolen, `00000${i}`)).status).toBe(400);
  // Even the right code is no longer checked: the day's guesses are used up, well before five minutes' ten.
  const locked = await disable(stolen, owner.backup[0]!);
  expect([locked.status, locked.body.error.code]).toEqual([429, 'too_many_attempts']);
  expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(300);
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, owner.token)).body.data.enabled).toBe(true);

  const mail = await smtp.waitFor((m) => m.to.includes(owner.email) && m.subject.startsWith(GUESSING), 5_000);
  expect(mail.text).toContain('from 127.0.0.1');
  expect(mail.text).toContain('User-Agent "thief/1.0"');
  expect(mail.text).toContain('change your password');
  // More refused guesses, past the notice window: still one mail.
  for (let i = 0; i < 3; i++) expect((await disable(stolen, '123456')).status).toBe(429);
  await Bun.sleep(1_500);
  await gw.services.notices.idle();
  expect(guessingMails(owner.email).length).toBe(1);
}, 480_000); // the day edge's wait (up to 6 min) and the run

test('a login with the password and a code has checks of its own; the stolen session cannot get new ones', async () => {
  const owner = await ownerWith2fa();
  const stolen = (await login(owner.username, owner.password, await totp(owner.secret, 0))).cookie;
  await clearOfWindowEdge(60_000, 86_400_000);
  for (let i = 0; i < 4; i++) expect((await disable(stolen, `11111${i}`)).status).toBe(400);
  expect((await disable(stolen, '222222')).status).toBe(429);
  // What the thief can do without the password changes nothing: log out and back in is impossible, and the
  // password alone (if it had it) is only the first step.
  expect((await login(owner.username, owner.password)).body.error.code).toBe('totp_required');
  expect((await disable(stolen, owner.backup[0]!)).status).toBe(429);

  // The owner logs in with both factors: the 2FA endpoints answer again.
  const fresh = await login(owner.username, owner.password, owner.backup[1]!);
  expect(fresh.status).toBe(200);
  const off = await disable(fresh.cookie, owner.backup[2]!);
  expect(off.status).toBe(200);
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, owner.token)).body.data.enabled).toBe(false);
}, 120_000);

test("the owner's logins give a stolen session no new guesses, and its lockout locks out none of the owner's other credentials", async () => {
  const owner = await ownerWith2fa();
  const stolen = (await login(owner.username, owner.password, await totp(owner.secret, 0))).cookie;
  await clearOfWindowEdge(60_000, 86_400_000);
  for (let i = 0; i < 4; i++) expect((await disable(stolen, `33333${i}`)).status).toBe(400);
  expect((await disable(stolen, '444444')).status).toBe(429);
  // The owner's own access token (made before the theft) still has its checks: the thief's guessing is no lockout of the owner.
  const own = await gw.api('POST', '/api/user/2fa/disable', { code: '555555' }, owner.token);
  expect([own.status, own.body.error.code]).toEqual([400, 'invalid_totp']);
  // The owner logs in with both factors, as every day: the thief's session is still refused (a login used to clear
  // the counts of the whole account, so each of the owner's logins gave the thief another day's guesses).
  expect((await login(owner.username, owner.password, owner.backup[3]!)).status).toBe(200);
  for (let i = 0; i < 3; i++) {
    const r = await disable(stolen, `66666${i}`);
    expect([r.status, r.body.error.code]).toEqual([429, 'too_many_attempts']);
  }
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, owner.token)).body.data.enabled).toBe(true);
}, 120_000);
