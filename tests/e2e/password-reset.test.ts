import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { startSmtp, type CapturedMail, type TestSmtp } from '../helpers/smtp';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  // Several tests here mail one account more often than the default per-account limit allows.
  gw = await startGateway({ ...smtp.env, PUBLIC_URL: 'https://gw.example.com/', RESET_IP_PER_MINUTE: '1000', RESET_EMAILS_PER_HOUR: '100', LOGIN_MAX_FAILURES: '2' });
}, 30_000);
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

const uniqueEmail = () => `p${crypto.randomUUID().slice(0, 8)}@example.com`;
const request = (g: TestGateway, email: string) => g.api('POST', '/api/user/reset/request', { email }, null);
const tokenOf = (m: CapturedMail) => /[?&]token=([A-Za-z0-9]+)/.exec(m.text)![1]!;

/** Requests a reset and returns the token read out of the delivered e-mail. */
async function mailedToken(g: TestGateway, email: string, to = email): Promise<string> {
  const after = smtp.messages.length;
  expect((await request(g, email)).status).toBe(200);
  const m = await smtp.waitFor((x) => smtp.messages.indexOf(x) >= after && x.to.includes(to));
  return tokenOf(m);
}

async function sessionCookie(g: TestGateway, username: string, password: string): Promise<string> {
  const res = await fetch(`${g.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
  expect(res.status).toBe(200);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

describe('reset request', () => {
  test('known and unknown addresses get the same status and body; only the known one gets mail', async () => {
    const email = uniqueEmail();
    await makeUser(gw, 1, { email });
    const before = smtp.messages.length;
    const known = await request(gw, email);
    const unknown = await request(gw, uniqueEmail());
    expect(known.status).toBe(200);
    expect(unknown.status).toBe(200);
    expect(known.body).toEqual(unknown.body);
    expect(known.body).toEqual({ success: true, message: '', data: null });
    const m = await smtp.waitFor((x) => x.to.includes(email));
    expect(m.from).toBe('gateway@test.local');
    expect(m.subject).toBe('Reset your password');
    expect(m.text).toContain('https://gw.example.com/user/reset?email=');
    await Bun.sleep(100);
    expect(smtp.messages.length).toBe(before + 1);
    // Stored hashed: the raw token is nowhere in the table.
    const token = tokenOf(m);
    expect((await gw.db.get('select count(*) as n from password_resets where token_hash = ?', token))).toEqual({ n: 0 });
  });

  test('known and unknown addresses answer within a small time difference', async () => {
    const email = uniqueEmail();
    await makeUser(gw, 1, { email });
    const time = async (e: string) => { const t = performance.now(); await request(gw, e); return performance.now() - t; };
    await time(email); await time(uniqueEmail()); // warm up
    const k: number[] = [];
    const u: number[] = [];
    for (let i = 0; i < 12; i++) {
      k.push(await time(email));
      u.push(await time(uniqueEmail()));
    }
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[xs.length >> 1]!;
    // Mail goes out after the response, so the known branch must not be measurably slower.
    expect(Math.abs(median(k) - median(u))).toBeLessThan(15);
  });

  test('the address matches case-insensitively, and disabled users get no mail', async () => {
    const email = uniqueEmail();
    await makeUser(gw, 1, { email });
    const token = await mailedToken(gw, email.toUpperCase(), email);
    expect(token.length).toBeGreaterThan(30);
    const off = uniqueEmail();
    await makeUser(gw, 1, { email: off, status: 2 });
    const before = smtp.messages.length;
    expect((await request(gw, off)).body).toEqual({ success: true, message: '', data: null });
    await Bun.sleep(200);
    expect(smtp.messages.length).toBe(before);
  }, 30_000);
});

describe('reset with a token', () => {
  test('sets the given password, ends every session, clears the lockout; the token works once', async () => {
    const email = uniqueEmail();
    const u = await makeUser(gw, 1, { email });
    const cookie = await sessionCookie(gw, u.username, u.password);
    // Lock the account (LOGIN_MAX_FAILURES=2).
    for (let i = 0; i < 2; i++) await gw.api('POST', '/api/user/login', { username: u.username, password: 'wrong-password' }, null);
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: u.password }, null)).status).toBe(429);

    const token = await mailedToken(gw, email);
    const res = await gw.api('POST', '/api/user/reset', { email, token, password: 'brand-new-pass-1' }, null);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: '', data: null });
    const self = await fetch(`${gw.url}/api/user/self`, { headers: { cookie } });
    expect(self.status).toBe(401);
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: u.password }, null)).status).toBe(401);
    await sessionCookie(gw, u.username, 'brand-new-pass-1');

    const again = await gw.api('POST', '/api/user/reset', { email, token, password: 'another-pass-22' }, null);
    const bogus = await gw.api('POST', '/api/user/reset', { email, token: 'x'.repeat(43), password: 'another-pass-22' }, null);
    expect(again.status).toBe(400);
    expect(again.body.error.code).toBe('invalid_reset_token');
    expect(again.body.error).toEqual(bogus.body.error);
  });

  test("evicts an intruder: every session ends and every gwm_ access token is revoked", async () => {
    const email = uniqueEmail();
    const u = await makeUser(gw, 1, { email });
    const intruderToken = (await gw.services.auth.createAccessToken(u.id, 'intruder')).token;
    const intruderCookie = await sessionCookie(gw, u.username, u.password);
    for (const t of [u.token, intruderToken]) expect((await gw.api('GET', '/api/user/self', undefined, t)).status).toBe(200);
    const token = await mailedToken(gw, email);
    expect((await gw.api('POST', '/api/user/reset', { email, token, password: 'recovered-pass-1' }, null)).status).toBe(200);
    for (const t of [u.token, intruderToken]) {
      const r = await gw.api('GET', '/api/user/self', undefined, t);
      expect(r.status).toBe(401);
    }
    expect((await fetch(`${gw.url}/api/user/self`, { headers: { cookie: intruderCookie } })).status).toBe(401);
    const list = await gw.services.auth.listAccessTokens(u.id);
    expect(list.length).toBe(2);
    expect(list.every((t) => t.revoked)).toBe(true);
  });

  test('a pending reset link dies when the password is changed or set, or the e-mail address moves', async () => {
    // The owner's answer to a reset mail they did not ask for (whoever reads that mailbox holds the link) is to
    // change the password or move the account to another address: the link must not outlive either.
    let email = uniqueEmail();
    const u = await makeUser(gw, 1, { email });
    const resetMail = async (to: string) => {
      const after = smtp.messages.length;
      expect((await request(gw, to)).status).toBe(200);
      return tokenOf(await smtp.waitFor((x) => smtp.messages.indexOf(x) >= after && x.to.includes(to) && x.subject === 'Reset your password'));
    };
    const refused = async (token: string, to = email) => {
      const r = await gw.api('POST', '/api/user/reset', { email: to, token, password: 'taken-over-pass-1' }, null);
      expect([r.status, r.body.error?.code]).toEqual([400, 'invalid_reset_token']);
    };
    let password = u.password;
    const changed = async (next: string) => {
      expect((await gw.api('POST', '/api/user/password', { current_password: password, new_password: next }, u.token)).status).toBe(200);
      password = next;
    };

    // The owner changes the password.
    let token = await resetMail(email);
    await changed('owner-changed-pass-1');
    await refused(token);

    // The owner moves the account to a new address (the link names the old one; the thief may know the new one).
    token = await resetMail(email);
    const moved = uniqueEmail();
    expect((await gw.api('PUT', '/api/user/self', { email: moved, current_password: password }, u.token)).status).toBe(200);
    await refused(token, moved);
    email = moved;

    // An admin moves it, or sets a password.
    token = await resetMail(email);
    const byAdmin = uniqueEmail();
    expect((await gw.api('PUT', '/api/user/', { id: u.id, email: byAdmin })).status).toBe(200);
    await refused(token, byAdmin);
    email = byAdmin;
    token = await resetMail(email);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, password: 'admin-set-pass-12' })).status).toBe(200);
    await refused(token);

    // Anything else leaves it working: a new display name, the same address sent again.
    token = await resetMail(email);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, display_name: 'still me', email })).status).toBe(200);
    expect((await gw.api('POST', '/api/user/reset', { email, token, password: 'recovered-pass-12' }, null)).status).toBe(200);
  }, 30_000);

  test('without a password a generated one is set and returned', async () => {
    const email = uniqueEmail();
    const u = await makeUser(gw, 1, { email });
    const token = await mailedToken(gw, email);
    const res = await gw.api('POST', '/api/user/reset', { email, token }, null);
    expect(res.status).toBe(200);
    const password = res.body.data.password as string;
    expect(password.length).toBeGreaterThanOrEqual(12);
    await sessionCookie(gw, u.username, password);
  });

  test('a new request voids the earlier token', async () => {
    const email = uniqueEmail();
    await makeUser(gw, 1, { email });
    const first = await mailedToken(gw, email);
    const second = await mailedToken(gw, email);
    expect(second).not.toBe(first);
    const r1 = await gw.api('POST', '/api/user/reset', { email, token: first, password: 'brand-new-pass-1' }, null);
    expect(r1.status).toBe(400);
    expect(r1.body.error.code).toBe('invalid_reset_token');
    expect((await gw.api('POST', '/api/user/reset', { email, token: second, password: 'brand-new-pass-1' }, null)).status).toBe(200);
  });

  test("another user's address, a bad password length or a wrong token do not consume the token", async () => {
    const email = uniqueEmail();
    const other = uniqueEmail();
    await makeUser(gw, 1, { email });
    await makeUser(gw, 1, { email: other });
    const token = await mailedToken(gw, email);
    const foreign = await gw.api('POST', '/api/user/reset', { email: other, token, password: 'brand-new-pass-1' }, null);
    expect(foreign.status).toBe(400);
    expect(foreign.body.error.code).toBe('invalid_reset_token');
    const unknown = await gw.api('POST', '/api/user/reset', { email: uniqueEmail(), token, password: 'brand-new-pass-1' }, null);
    expect(unknown.body.error).toEqual(foreign.body.error);
    const short = await gw.api('POST', '/api/user/reset', { email, token, password: 'short' }, null);
    expect(short.status).toBe(400);
    expect(short.body.error).toMatchObject({ code: 'invalid_password', param: 'password' });
    const long = await gw.api('POST', '/api/user/reset', { email, token, password: 'x'.repeat(129) }, null);
    expect(long.body.error.code).toBe('invalid_password');
    expect((await gw.api('POST', '/api/user/reset', { email, token, password: 'brand-new-pass-1' }, null)).status).toBe(200);
  });

  test('concurrent uses of one token: exactly one wins', async () => {
    const email = uniqueEmail();
    await makeUser(gw, 1, { email });
    const token = await mailedToken(gw, email);
    const rs = await Promise.all(Array.from({ length: 4 }, (_, i) => gw.api('POST', '/api/user/reset', { email, token, password: `parallel-pass-${i}` }, null)));
    expect(rs.filter((r) => r.status === 200).length).toBe(1);
    expect(rs.filter((r) => r.status === 400).length).toBe(3);
  });

  test('missing fields are 400 with the error object', async () => {
    const r = await gw.api('POST', '/api/user/reset', { email: 'a@b.c' }, null);
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe('token');
  });
});

describe('expiry, per-IP limit and SMTP auth', () => {
  test('a token expires after RESET_TOKEN_TTL_SECONDS; requests per address are limited', async () => {
    const g = await startGateway({ ...smtp.env, RESET_TOKEN_TTL_SECONDS: '1', RESET_IP_PER_MINUTE: '3' });
    try {
      const email = uniqueEmail();
      await makeUser(g, 1, { email });
      // The 4 requests, a mail and a 1.1 s sleep apart, in one window of the minute (clock-aligned in PostgreSQL mode).
      await clearOfWindowEdge(10_000);
      const token = await mailedToken(g, email);
      await Bun.sleep(1100);
      const r = await g.api('POST', '/api/user/reset', { email, token, password: 'brand-new-pass-1' }, null);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_reset_token');
      expect((await request(g, uniqueEmail())).status).toBe(200);
      const limited = await request(g, email);
      expect(limited.status).toBe(429);
      expect(limited.body.error.code).toBe('too_many_attempts');
      expect((await request(g, uniqueEmail())).status).toBe(429);
    } finally {
      await g.stop();
    }
  }, 45_000); // a 3-node start, the window edge's wait and the run

  test('reset e-mails per account are limited, however the address is spelled; the last link sent keeps working', async () => {
    // The per-IP limit alone let a few client addresses flood one inbox. Counted per account after the answer,
    // so every request still gets the same 200 at once.
    const g = await startGateway({ ...smtp.env, RESET_IP_PER_MINUTE: '1000', RESET_EMAILS_PER_HOUR: '2' });
    try {
      const email = uniqueEmail();
      const u = await makeUser(g, 1, { email });
      const mine = () => smtp.messages.filter((m) => m.to.includes(email) && m.subject === 'Reset your password');
      // The 4 requests in one window of the hour (clock-aligned in PostgreSQL mode).
      await clearOfWindowEdge(10_000, 3_600_000);
      for (const spelled of [email, email.toUpperCase(), `  ${email} `, email.replace(/^p/, 'P')]) {
        const r = await request(g, spelled);
        expect([r.status, r.body]).toEqual([200, { success: true, message: '', data: null }]);
      }
      await smtp.waitFor(() => mine().length >= 2);
      await Bun.sleep(1000);
      expect(mine()).toHaveLength(2);
      // The throttled requests wrote no token: the link of the last mail written is still valid (behind the cluster
      // proxy two nodes may deliver in either order, so both are tried; the other was voided by it).
      const statuses: number[] = [];
      for (const m of mine()) statuses.push((await g.api('POST', '/api/user/reset', { email, token: tokenOf(m), password: 'after-flood-pass-1' }, null)).status);
      expect(statuses.sort()).toEqual([200, 400]);
      expect((await g.api('POST', '/api/user/login', { username: u.username, password: 'after-flood-pass-1' }, null)).status).toBe(200);
      // Another account is not held back by this one's count.
      const other = uniqueEmail();
      await makeUser(g, 1, { email: other });
      await mailedToken(g, other);
    } finally {
      await g.stop();
    }
  }, 45_000); // a 3-node start, the window edge's wait and the run

  test('without SMTP configured the request still answers 200 with the same body', async () => {
    const g = await startGateway();
    try {
      const email = uniqueEmail();
      await makeUser(g, 1, { email });
      const known = await request(g, email);
      expect(known.status).toBe(200);
      expect(known.body).toEqual((await request(g, uniqueEmail())).body);
    } finally {
      await g.stop();
    }
  });

  test('SMTP_USER/SMTP_PASSWORD authenticate to the mail server', async () => {
    const authed = await startSmtp({ user: 'mailer', password: 'mail-secret' });
    const g = await startGateway({ ...authed.env, RESET_IP_PER_MINUTE: '100' });
    try {
      const email = uniqueEmail();
      await makeUser(g, 1, { email });
      expect((await request(g, email)).status).toBe(200);
      const m = await authed.waitFor((x) => x.to.includes(email));
      expect(m.authUser).toBe('mailer');
      expect(m.text).toContain('http://localhost:3000/user/reset?');
    } finally {
      await g.stop();
      await authed.stop();
    }
  });
});
