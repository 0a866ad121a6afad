/**
 * Wrong authenticator codes at login are capped per account and day, and a password reset clears none of it. Before,
 * only the login lockout counted them, and a reset cleared it: whoever read the owner's mail could reset, guess a few
 * codes, and reset again (5 reset mails an hour: ~18,000 guesses a month). Past the cap a backup code still logs in,
 * and the owner is told once a day. Real gateway over HTTP, real SMTP server.
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
  gw = await startGateway({
    ...smtp.env, TOTP_LOGIN_MAX_FAILURES_PER_DAY: '4', LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '60',
    RESET_IP_PER_MINUTE: '1000', SECURITY_NOTICE_WINDOW_SECONDS: '1',
  });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

const totp = (secret: string, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });
/** A six-digit code none of the accepted steps (±1) has. */
async function wrongCode(secret: string): Promise<string> {
  const valid = new Set(await Promise.all([-1, 0, 1].map((s) => totp(secret, s))));
  for (let n = 123_457; ; n += 111_111) {
    const c = String(n % 1_000_000).padStart(6, '0');
    if (!valid.has(c)) return c;
  }
}

test('a reset does not give back the day\'s wrong login codes; a backup code still logs in; the owner is told', async () => {
  const email = `${crypto.randomUUID().slice(0, 8)}@example.com`;
  const u = await makeUser(gw, 1, { email });
  const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
  const secret = setup.body.data.secret as string;
  await clearOfWindowEdge(3_000, 30_000);
  const en = await gw.api('POST', '/api/user/2fa/enable', { code: await totp(secret, -1), current_password: u.password }, u.token);
  expect(en.status).toBe(200);
  const backup = en.body.data.backup_codes as string[];
  const login = (password: string, totp_code: string) => gw.api('POST', '/api/user/login', { username: u.username, password, totp_code }, null);
  // The day's wrong codes in one window of the day (clock-aligned, SQLite too): across UTC midnight the
  // previous day's 4 count as floor(4 × 0.99…) = 3 and the capped attempt below would be checked.
  await clearOfWindowEdge(60_000, 86_400_000);

  // Three wrong codes with the right password, then the login lockout.
  for (let i = 0; i < 3; i++) expect((await login(u.password, await wrongCode(secret))).body.error.code).toBe('invalid_totp');
  expect((await login(u.password, await wrongCode(secret))).body.error.code).toBe('account_locked');

  // Whoever reads the mail resets the password: the lockout is cleared, as documented.
  const before = smtp.messages.length;
  expect((await gw.api('POST', '/api/user/reset/request', { email }, null)).status).toBe(200);
  const mail = await smtp.waitFor((m) => m.to.includes(email) && smtp.messages.indexOf(m) >= before && /token=/.test(m.text), 5_000);
  const token = /[?&]token=([A-Za-z0-9]+)/.exec(mail.text)![1]!;
  const password = 'reset-by-whoever-1';
  expect((await gw.api('POST', '/api/user/reset', { email, token, password }, null)).status).toBe(200);

  // But not the day's count of wrong codes: one more is checked (the fourth), then none.
  expect((await login(password, await wrongCode(secret))).body.error.code).toBe('invalid_totp');
  const capped = await login(password, await wrongCode(secret));
  expect(capped.status).toBe(429);
  expect(capped.body.error.code).toBe('too_many_attempts');
  expect(capped.body.error.message).toContain('backup code');
  expect(Number(capped.headers.get('retry-after'))).toBeGreaterThan(0);

  // A backup code still logs in past the cap (50 bits: not worth guessing); an authenticator code, even the right
  // one, is not checked until the day is over.
  const viaBackup = await login(password, backup[0]!);
  expect(viaBackup.status).toBe(200);
  await clearOfWindowEdge(3_000, 30_000);
  expect((await login(password, await totp(secret))).body.error.code).toBe('too_many_attempts');

  // Told once: someone with the password is guessing codes.
  const told = await smtp.waitFor((m) => m.to.includes(email) && m.text.includes('Wrong two-factor codes were tried at login with your password'), 5_000);
  expect(told.text).toContain('a backup code still works');
}, 120_000); // the day edge's wait and the run
