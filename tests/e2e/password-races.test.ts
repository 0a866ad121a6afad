/**
 * Password checks cannot be multiplied by sending guesses in parallel or across routes (an attacker's review):
 * a burst of logins gets at most LOGIN_MAX_FAILURES checks evaluated, a burst of password changes at most the
 * change limit, and the e-mail change (its current_password) shares that limit. An admin setting a user's
 * password ends the user's access tokens too. Over real HTTP.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { generate } from 'otplib';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { holdWrites, whileHeld } from '../helpers/hold-writes';
import { clearOfWindowEdge } from '../helpers/window-edge';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '60', LOGIN_IP_PER_MINUTE: '10000' }); });
afterAll(async () => { await gw.stop(); });

const login = (username: string, password: string, totp_code?: string) =>
  gw.api('POST', '/api/user/login', { username, password, ...(totp_code ? { totp_code } : {}) }, null);
const tally = (rs: Array<{ status: number; body: any }>) => {
  const out: Record<string, number> = {};
  for (const r of rs) {
    const k = `${r.status} ${r.body?.error?.code ?? 'ok'}`;
    out[k] = (out[k] ?? 0) + 1;
  }
  return out;
};

/**
 * Checks a burst may get: the limit, each claimed before its slow verify. A right password clears the count (as it
 * should: the owner is back), so when it was checked the wrong guesses claimed after it get a fresh window: the limit
 * again. On one node the right one, sent last, is claimed after the window is full; through 3 nodes behind a
 * proxy it can be among the first claimed (a cluster run saw 9 checks of 5).
 */
const checkedAtMost = (limit: number, t: Record<string, number>) => (t['200 ok'] ? 2 * limit : limit);

describe('parallel guesses', () => {
  test('login: 24 wrong passwords and the right one at once get at most 3 checks (6 if the right one was checked); the rest are refused as locked', async () => {
    const u = await makeUser(gw);
    const guesses = [...Array.from({ length: 24 }, (_, i) => `wrong-password-${i}`), u.password];
    const rs = await Promise.all(guesses.map((p) => login(u.username, p)));
    const t = tally(rs);
    // Checked: a 401 (wrong) or the 200 (right, if it was among the first 3 claimed); never more than the limit,
    // or twice it when the right one was checked (see checkedAtMost).
    expect((t['401 invalid_credentials'] ?? 0) + (t['200 ok'] ?? 0)).toBeLessThanOrEqual(checkedAtMost(3, t));
    expect(t['429 account_locked']).toBeGreaterThanOrEqual(guesses.length - checkedAtMost(3, t));
    // Unless the right password was among the checked ones, the account is locked now, whatever is sent.
    if (!t['200 ok']) expect((await login(u.username, u.password)).body.error.code).toBe('account_locked');
  }, 30_000);

  test('password change: 30 wrong current passwords and the right one at once get at most 5 checks (10 if the right one was checked)', async () => {
    // All in one window of the 5-minute limit (wall-clock aligned in PostgreSQL mode; see clearOfWindowEdge).
    await clearOfWindowEdge(12_000, 300_000);
    const u = await makeUser(gw);
    const guesses = [...Array.from({ length: 30 }, (_, i) => `wrong-password-${i}`), u.password];
    const rs = await Promise.all(guesses.map((current_password) => gw.api('POST', '/api/user/password', { current_password, new_password: 'attacker-pass-123' }, u.token)));
    const t = tally(rs);
    expect((t['400 invalid_current_password'] ?? 0) + (t['200 ok'] ?? 0)).toBeLessThanOrEqual(checkedAtMost(5, t));
    expect(t['429 too_many_attempts']).toBeGreaterThanOrEqual(guesses.length - checkedAtMost(5, t));
  }, 30_000);

  test('the e-mail change\'s current_password is limited too, together with the password change\'s', async () => {
    // Eight checks in one window of the 5-minute limit: across its edge the first window's counts weigh a little
    // less than whole and a sixth check passes (a CI run through 3 nodes met one).
    await clearOfWindowEdge(12_000, 300_000);
    const u = await makeUser(gw);
    const email = (current_password: string) => gw.api('PUT', '/api/user/self', { email: `${u.username}@attacker.test`, current_password }, u.token);
    const change = (current_password: string) => gw.api('POST', '/api/user/password', { current_password, new_password: 'attacker-pass-123' }, u.token);
    const seen = [];
    for (let i = 0; i < 5; i++) seen.push((await (i % 2 ? change : email)(`wrong-${i}`)).status);
    expect(seen).toEqual([403, 400, 403, 400, 403]);
    // The window is spent for both routes, even for the right password.
    for (const r of [await email(u.password), await change(u.password), await email('wrong-again')]) {
      expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 429, code: 'too_many_attempts' });
    }
    expect(String((await gw.api('GET', '/api/user/self', undefined, u.token)).body.data.email)).not.toContain('attacker');
  }, 30_000);
});

describe('two steps of a 2FA login', () => {
  test('the right password waiting for its code is not a failure: after 2 wrong passwords, password then password + code logs in', async () => {
    const u = await makeUser(gw);
    const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
    const secret = setup.body.data.secret as string;
    // The previous step's code, sent clear of the current step's end (the password is checked first).
    await clearOfWindowEdge(3_000, 30_000);
    expect((await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret, epoch: Math.floor(Date.now() / 1000) - 30 }), current_password: u.password }, u.token)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await login(u.username, 'wrong-password')).status).toBe(401);
    // The 3rd check would have locked the account had it counted.
    expect((await login(u.username, u.password)).body.error.code).toBe('totp_required');
    expect((await login(u.username, u.password, await generate({ secret }))).status).toBe(200);
  }, 30_000);
});

describe('an admin setting a password', () => {
  test('ends the user\'s sessions and access tokens (an intruder\'s token stops working)', async () => {
    const u = await makeUser(gw);
    const intruder = (await gw.services.auth.createAccessToken(u.id, 'stolen')).token;
    expect((await gw.api('GET', '/api/user/self', undefined, intruder)).status).toBe(200);
    expect((await gw.api('PUT', '/api/user/', { id: u.id, password: 'reset-by-admin-1' })).status).toBe(200);
    for (const t of [intruder, u.token]) expect((await gw.api('GET', '/api/user/self', undefined, t)).status).toBe(401);
    expect((await login(u.username, 'reset-by-admin-1')).status).toBe(200);
  }, 30_000);
});

describe('a login racing a password change', () => {
  test('a session opened with the old password while it changes does not survive the change', async () => {
    // An intruder who knows the password logs in again and again; the owner changes it. A login that read the old
    // hash before the change and wrote its session after the change ended every other session must not keep it.
    const g = await startGateway({ LOGIN_MAX_FAILURES: '1000', LOGIN_IP_PER_MINUTE: '100000' });
    try {
      const u = await makeUser(g);
      const loginAt = (password: string) => fetch(`${g.url}/api/user/login`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: u.username, password }),
      });
      const t0 = performance.now();
      expect((await loginAt(u.password)).status).toBe(200);
      const hashMs = performance.now() - t0;
      let password = u.password;
      const survivors: string[] = [];
      for (let round = 0; round < 2 && !survivors.length; round++) {
        const next = `changed-password-${round}`;
        const change = g.api('POST', '/api/user/password', { current_password: password, new_password: next }, u.token);
        // Logins start all through the change (its check, its new hash, its write), spread over about 4 hash times
        // (40 of them: more only queue up behind one another on the hashing threads).
        const logins: Array<Promise<Response>> = [];
        for (let i = 0; i < 40; i++) {
          logins.push(loginAt(password));
          await Bun.sleep(Math.max(2, hashMs / 10));
        }
        expect((await change).status).toBe(200);
        for (const res of await Promise.all(logins)) {
          if (res.status !== 200) continue;
          const cookie = res.headers.get('set-cookie')!.split(';')[0]!;
          if ((await fetch(`${g.url}/api/user/self`, { headers: { cookie } })).status !== 401) survivors.push(cookie);
        }
        password = next;
      }
      expect(survivors).toEqual([]);
    } finally {
      await g.stop();
    }
  }, 60_000);

  test('an access token minted with the old password while it changes does not survive the change', async () => {
    // The same race through POST /api/user/access_token: its current_password check is as slow as a login's.
    const g = await startGateway({ LOGIN_MAX_FAILURES: '1000', LOGIN_IP_PER_MINUTE: '100000' });
    try {
      const u = await makeUser(g);
      const t0 = performance.now();
      expect((await g.api('POST', '/api/user/login', { username: u.username, password: u.password }, null)).status).toBe(200);
      const hashMs = performance.now() - t0;
      let password = u.password;
      const survivors: string[] = [];
      for (let round = 0; round < 3 && !survivors.length; round++) {
        const intruder = (await g.services.auth.createAccessToken(u.id, 'intruder')).token;
        const next = `changed-password-${round}`;
        const change = g.api('POST', '/api/user/password', { current_password: password, new_password: next }, u.token);
        const mints: Array<Promise<{ status: number; body: any }>> = [];
        for (let i = 0; i < 40; i++) {
          await Bun.sleep(Math.max(2, hashMs / 10));
          mints.push(g.api('POST', '/api/user/access_token', { name: 'persist', current_password: password }, intruder));
        }
        expect((await change).status).toBe(200);
        for (const r of await Promise.all(mints)) {
          if (r.status !== 200) continue;
          if ((await g.api('GET', '/api/user/self', undefined, r.body.data.token)).status !== 401) survivors.push(r.body.data.token);
        }
        password = next;
      }
      expect(survivors).toEqual([]);
    } finally {
      await g.stop();
    }
  }, 60_000);
});

describe('writes checked against a password that changed meanwhile', () => {
  const token = async (u: { token: string; password: string }) =>
    (await gw.api('POST', '/api/user/access_token', { name: 'second', current_password: u.password }, u.token)).body.data.token as string;

  /**
   * Sends `write` (to node 1, whose store holds it: `hold`), lets `change` (the owner's password change, answering
   * 200) run while it is held, then lets it land and answers what it answered.
   */
  const landingAfter = (hold: ReturnType<typeof holdWrites>, write: () => Promise<{ status: number; body: any }>, change: () => Promise<number>) =>
    whileHeld(hold, write, async () => { expect(await change()).toBe(200); });

  test('two password changes checked against one password at once: one wins, the other is refused', async () => {
    // The owner changes the password to evict an intruder who knows it; the intruder sends its own change at the same
    // moment. Both checked the same old password; the later write used to land too (200 to both), leaving the
    // intruder's password in place and ending the owner's credentials.
    const u = await makeUser(gw);
    const owner = await token(u);
    const intruder = await token(u);
    const [a, b] = await Promise.all([
      gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-password' }, owner),
      gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'intruder-new-password' }, intruder),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 400]);
    const [won, lost] = a.status === 200 ? [{ pw: 'owner-new-password', tok: owner }, { pw: 'intruder-new-password', tok: intruder, r: b }] : [{ pw: 'intruder-new-password', tok: intruder }, { pw: 'owner-new-password', tok: owner, r: a }];
    expect(lost.r.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' });
    expect((await login(u.username, won.pw)).status).toBe(200);
    expect((await login(u.username, lost.pw)).status).toBe(401);
    expect((await gw.api('GET', '/api/user/self', undefined, won.tok)).status).toBe(200);
    expect((await gw.api('GET', '/api/user/self', undefined, lost.tok)).status).toBe(401);
  }, 30_000);

  test('2FA turned on with the old password does not land after the password change', async () => {
    // An intruder's enable (its own authenticator) passed its checks before the owner's password change and is
    // written after it: it used to turn 2FA on with the intruder's secret and end the owner's sessions, so the owner,
    // who had just changed the password, could no longer log in at all.
    const u = await makeUser(gw);
    const intruder = await token(u);
    const setup = await gw.nodeApi('POST', '/api/user/2fa/setup', undefined, intruder);
    expect(setup.status).toBe(200);
    const hold = holdWrites(gw.services.security, 'enableTotp', ([userId]) => userId === u.id);
    await clearOfWindowEdge(3_000, 30_000);
    const code = await generate({ secret: setup.body.data.secret });
    const r = await landingAfter(hold, () => gw.nodeApi('POST', '/api/user/2fa/enable', { code, current_password: u.password }, intruder),
      async () => (await gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-password' }, u.token)).status);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' });
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.enabled).toBe(false);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).status).toBe(200);
    expect((await login(u.username, 'owner-new-password')).status).toBe(200);
  }, 30_000);

  test('new backup codes asked with the old password do not land after the password change', async () => {
    // The intruder's request passed its checks (password, code) before the owner's password change; written after
    // it, the codes used to void the owner's and end every other session, the owner's that had just changed it too.
    const u = await makeUser(gw);
    const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
    const secret = setup.body.data.secret as string;
    await clearOfWindowEdge(3_000, 30_000);
    const en = await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret, epoch: Math.floor(Date.now() / 1000) - 30 }), current_password: u.password }, u.token);
    expect(en.status).toBe(200);
    const ownerCodes = en.body.data.backup_codes as string[];
    const intruder = await token(u);
    const owner = await fetch(`${gw.url}/api/user/login`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: u.username, password: u.password, totp_code: ownerCodes[0] }),
    });
    expect(owner.status).toBe(200);
    const cookie = owner.headers.get('set-cookie')!.split(';')[0]!;
    const hold = holdWrites(gw.services.security, 'replaceBackupCodes', ([userId]) => userId === u.id);
    await clearOfWindowEdge(3_000, 30_000);
    const code = await generate({ secret });
    const r = await landingAfter(hold, () => gw.nodeApi('POST', '/api/user/2fa/backup_codes', { code, current_password: u.password }, intruder),
      async () => (await fetch(`${gw.url}/api/user/password`, {
        method: 'POST', headers: { cookie, 'content-type': 'application/json' }, body: JSON.stringify({ current_password: u.password, new_password: 'owner-new-password' }),
      })).status);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' });
    expect((await fetch(`${gw.url}/api/user/self`, { headers: { cookie } })).status).toBe(200);
    expect((await login(u.username, 'owner-new-password', ownerCodes[1])).status).toBe(200);
  }, 30_000);

  /** Logs in over HTTP and answers the session cookie. */
  async function sessionOf(username: string, password: string, totp_code: string): Promise<string> {
    const r = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password, totp_code }) });
    expect(r.status).toBe(200);
    return r.headers.get('set-cookie')!.split(';')[0]!;
  }
  const selfStatus = async (cookie: string) => (await fetch(`${gw.url}/api/user/self`, { headers: { cookie } })).status;

  test('2FA turned on just before the password change does not end the session the owner opened after it', async () => {
    // The intruder's enable committed first (its checks all passed), then the owner changed the password (with an
    // access token) and logged in again; the enable used to end the other sessions only after its write, so the
    // owner's new session, opened after the change, was ended by the intruder's earlier call.
    const u = await makeUser(gw);
    const owner = await token(u);
    const intruder = await token(u);
    const setup = await gw.nodeApi('POST', '/api/user/2fa/setup', undefined, intruder);
    const secret = setup.body.data.secret as string;
    const hold = holdWrites(gw.services.security, 'enableTotp', ([userId]) => userId === u.id, true);
    await clearOfWindowEdge(3_000, 30_000);
    const code = await generate({ secret, epoch: Math.floor(Date.now() / 1000) - 30 });
    let cookie = '';
    const r = await landingAfter(hold, () => gw.nodeApi('POST', '/api/user/2fa/enable', { code, current_password: u.password }, intruder), async () => {
      const changed = await gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-password' }, owner);
      // The test stands for an owner who can answer the second factor now on.
      cookie = await sessionOf(u.username, 'owner-new-password', await generate({ secret }));
      return changed.status;
    });
    expect(r.status).toBe(200);
    expect(await selfStatus(cookie)).toBe(200);
  }, 30_000);

  test('new backup codes issued just before the password change do not end the session the owner opened after it', async () => {
    const u = await makeUser(gw);
    const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
    const secret = setup.body.data.secret as string;
    await clearOfWindowEdge(3_000, 30_000);
    const now = Math.floor(Date.now() / 1000);
    expect((await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret, epoch: now - 30 }), current_password: u.password }, u.token)).status).toBe(200);
    const owner = await token(u);
    const intruder = await token(u);
    const hold = holdWrites(gw.services.security, 'replaceBackupCodes', ([userId]) => userId === u.id, true);
    let cookie = '';
    // Three successive time steps, each one used once: the owner's enable, the intruder's code, the owner's login.
    const code = await generate({ secret, epoch: now });
    const r = await landingAfter(hold, () => gw.nodeApi('POST', '/api/user/2fa/backup_codes', { code, current_password: u.password }, intruder), async () => {
      const changed = await gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-password' }, owner);
      cookie = await sessionOf(u.username, 'owner-new-password', await generate({ secret, epoch: now + 30 }));
      return changed.status;
    });
    expect(r.status).toBe(200);
    expect(await selfStatus(cookie)).toBe(200);
  }, 30_000);

  test('an e-mail change checked against the old password does not land after the password change', async () => {
    // The intruder's e-mail change (the address that receives reset links) passed its credential and password
    // checks before the owner's password change; its write is held until that change has answered.
    const email = `own-${crypto.randomUUID().slice(0, 8)}@example.com`;
    const u = await makeUser(gw, 1, { email });
    const intruder = await token(u);
    // A new address is a guarded write (updateKeepingRoot re-checks its case variants in the transaction).
    const hold = holdWrites(gw.services.users, 'updateKeepingRoot', ([id, patch]) => id === u.id && patch.email !== undefined);
    const r = await landingAfter(hold, () => gw.nodeApi('PUT', '/api/user/self', { email: 'intruder@evil.example', current_password: u.password }, intruder),
      async () => (await gw.api('POST', '/api/user/password', { current_password: u.password, new_password: 'owner-new-password' }, u.token)).status);
    expect(r.status).toBe(403);
    expect(r.body.error).toMatchObject({ code: 'invalid_password', param: 'current_password' });
    expect((await gw.api('GET', `/api/user/${u.id}`)).body.data.email).toBe(email);
  }, 30_000);
});
