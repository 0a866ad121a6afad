import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { clearOfWindowEdge } from '../helpers/window-edge';
import { generate } from 'otplib';
import { ROOT_PASSWORD, makeUser, startGateway, type TestGateway } from '../helpers/gateway';

let gw: TestGateway;
beforeAll(async () => { gw = await startGateway({ LOGIN_MAX_FAILURES: '3', LOGIN_LOCK_SECONDS: '60' }); });
afterAll(async () => { await gw.stop(); });

type User = Awaited<ReturnType<typeof makeUser>>;

/**
 * A TOTP code `steps` 30-second steps away from now. A code's step is accepted once, so each
 * test uses increasing offsets (-1, 0, +1: all within the ±1 step tolerance).
 */
const totp = (secret: string, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

const login = (u: User, totp_code?: string, password = u.password) =>
  gw.api('POST', '/api/user/login', { username: u.username, password, ...(totp_code === undefined ? {} : { totp_code }) }, null);

/** Sets up and enables 2FA (confirming with the previous step's code); returns the secret and backup codes. */
async function enable2fa(u: User): Promise<{ secret: string; codes: string[] }> {
  const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
  expect(setup.status).toBe(200);
  const secret = setup.body.data.secret as string;
  const en = await gw.api('POST', '/api/user/2fa/enable', { code: await totp(secret, -1) }, u.token);
  expect(en.status).toBe(200);
  return { secret, codes: en.body.data.backup_codes };
}

const storedSecret = async (id: number) => ((await gw.db.get('select totp_secret as s from users where id = ?', id)) as { s: string | null }).s;

describe('setup, enable, login, disable', () => {
  test('full cycle with a sealed secret, replay protection and clear errors', async () => {
    const u = await makeUser(gw);
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data).toEqual({ enabled: false, backup_codes_remaining: 0 });
    expect((await gw.api('POST', '/api/user/2fa/enable', { code: '123456' }, u.token)).body.error.code).toBe('totp_not_set_up');

    const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
    expect(setup.status).toBe(200);
    const { secret, otpauth_uri, qr } = setup.body.data;
    expect(secret).toMatch(/^[A-Z2-7]{32}$/);
    expect(otpauth_uri).toBe(`otpauth://totp/AI%20Gateway:${u.username}?secret=${secret}&issuer=AI%20Gateway`);
    expect(qr).toBe(otpauth_uri);
    const sealed = (await storedSecret(u.id))!;
    expect(sealed.startsWith('v1.')).toBe(true);
    expect(sealed).not.toContain(secret);
    // Not active until confirmed: login needs no code yet.
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.enabled).toBe(false);
    expect((await login(u)).status).toBe(200);

    for (const bad of ['000000', '12345', '1234567', 'abcdef', '']) {
      const r = await gw.api('POST', '/api/user/2fa/enable', { code: bad }, u.token);
      expect(r.status).toBe(400);
      // The empty string fails the body schema (minLength); the rest are wrong codes.
      expect(r.body.error.code).toBe(bad === '' ? 'out_of_range' : 'invalid_totp');
      expect(r.body.error.param).toBe('code');
    }
    const en = await gw.api('POST', '/api/user/2fa/enable', { code: await totp(secret, -1) }, u.token);
    expect(en.status).toBe(200);
    const codes = en.body.data.backup_codes as string[];
    expect(codes.length).toBe(10);
    for (const c of codes) expect(c).toMatch(/^[A-Z2-7]{5}-[A-Z2-7]{5}$/);
    expect(new Set(codes).size).toBe(10);
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data).toEqual({ enabled: true, backup_codes_remaining: 10 });
    expect((await gw.api('POST', '/api/user/2fa/setup', undefined, u.token)).status).toBe(409);
    expect((await gw.api('POST', '/api/user/2fa/enable', { code: await totp(secret) }, u.token)).status).toBe(409);
    // Backup codes are stored hashed.
    const rows = (await gw.db.all('select code_hash as h from backup_codes where user_id = ?', u.id)) as { h: string }[];
    expect(rows.length).toBe(10);
    for (const r of rows) expect(codes.some((c) => r.h.includes(c) || r.h.includes(c.replace('-', '')))).toBe(false);

    const need = await login(u);
    expect(need.status).toBe(401);
    expect(need.body.error).toMatchObject({ code: 'totp_required', param: 'totp_code' });
    const now = await totp(secret, 0);
    expect((await login(u, now)).status).toBe(200);
    const replay = await login(u, now);
    expect(replay.status).toBe(401);
    expect(replay.body.error.code).toBe('invalid_totp');
    // An older step than the last accepted one is refused too.
    expect((await login(u, await totp(secret, -1))).status).toBe(401);

    const dis = await gw.api('POST', '/api/user/2fa/disable', { code: await totp(secret, 1) }, u.token);
    expect(dis.status).toBe(200);
    expect(dis.body).toEqual({ success: true, message: '', data: null });
    expect((await storedSecret(u.id))).toBeNull();
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data).toEqual({ enabled: false, backup_codes_remaining: 0 });
    expect((await login(u)).status).toBe(200);
    expect((await gw.api('POST', '/api/user/2fa/disable', { code: '123456' }, u.token)).body.error.code).toBe('totp_not_enabled');
  });

  test('concurrent logins with the same code: only one passes', async () => {
    const u = await makeUser(gw);
    const { secret } = await enable2fa(u);
    const code = await totp(secret, 0);
    const rs = await Promise.all([login(u, code), login(u, code), login(u, code)]);
    expect(rs.map((r) => r.status).sort()).toEqual([200, 401, 401]);
  });

  test('the 2FA endpoints need a logged-in caller', async () => {
    for (const [m, p] of [['GET', '/api/user/2fa/status'], ['POST', '/api/user/2fa/setup'], ['POST', '/api/user/2fa/disable'], ['POST', '/api/user/2fa/backup_codes']] as const) {
      const r = await gw.api(m, p, m === 'POST' ? { code: '123456' } : undefined, null);
      expect(r.status).toBe(401);
    }
  });
});

describe('backup codes', () => {
  test('single use at login, case and hyphens ignored, regenerate voids the old set, disable by backup code', async () => {
    const u = await makeUser(gw);
    const { secret, codes } = await enable2fa(u);
    expect((await login(u, codes[0])).status).toBe(200);
    const reused = await login(u, codes[0]);
    expect(reused.status).toBe(401);
    expect(reused.body.error.code).toBe('invalid_totp');
    expect((await login(u, codes[1]!.toLowerCase().replace('-', ' '))).status).toBe(200);
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.backup_codes_remaining).toBe(8);

    // Regenerating needs an authenticator code, not a backup code.
    const withBackup = await gw.api('POST', '/api/user/2fa/backup_codes', { code: codes[2] }, u.token);
    expect(withBackup.status).toBe(400);
    expect(withBackup.body.error.code).toBe('invalid_totp');
    const regen = await gw.api('POST', '/api/user/2fa/backup_codes', { code: await totp(secret, 0) }, u.token);
    expect(regen.status).toBe(200);
    const fresh = regen.body.data.backup_codes as string[];
    expect(fresh.length).toBe(10);
    expect(fresh.some((c) => codes.includes(c))).toBe(false);
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.backup_codes_remaining).toBe(10);
    expect((await login(u, codes[3])).status).toBe(401);

    // Disable 2FA accepts an unused backup code; a used one is refused.
    expect((await login(u, fresh[0])).status).toBe(200);
    expect((await gw.api('POST', '/api/user/2fa/disable', { code: fresh[0] }, u.token)).body.error.code).toBe('invalid_totp');
    expect((await gw.api('POST', '/api/user/2fa/disable', { code: fresh[1] }, u.token)).status).toBe(200);
    expect((await gw.db.get('select count(*) as n from backup_codes where user_id = ?', u.id))).toEqual({ n: 0 });
  });
});

describe('guessing limits', () => {
  test('wrong codes at login count toward the account lockout', async () => {
    const u = await makeUser(gw);
    const { secret } = await enable2fa(u);
    for (const bad of ['000000', '12345', 'AAAAA-AAAAA']) {
      const r = await login(u, bad);
      expect(r.status).toBe(401);
      expect(r.body.error.code).toBe('invalid_totp');
    }
    const locked = await login(u, await totp(secret, 0));
    expect(locked.status).toBe(429);
    expect(locked.body.error.code).toBe('account_locked');
  });

  test('wrong codes on the 2FA endpoints are limited per user', async () => {
    const u = await makeUser(gw);
    const { secret } = await enable2fa(u);
    // Failures count in a five-minute window aligned to the clock (see window-edge.ts).
    await clearOfWindowEdge(6_000, 300_000);
    for (let i = 0; i < 10; i++) expect((await gw.api('POST', '/api/user/2fa/disable', { code: '000000' }, u.token)).status).toBe(400);
    const r = await gw.api('POST', '/api/user/2fa/disable', { code: await totp(secret, 0) }, u.token);
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('too_many_attempts');
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
  }, 30_000);
});

describe('admin reset of 2FA', () => {
  test('only for users with a lower role than the caller', async () => {
    const user = await makeUser(gw);
    await enable2fa(user);
    const admin = await makeUser(gw, 10);
    const admin2 = await makeUser(gw, 10);
    await enable2fa(admin2);
    const root = (await gw.services.users.byUsername('root'))!;

    expect((await gw.api('POST', `/api/user/${user.id}/2fa/reset`, undefined, user.token)).status).toBe(403);
    const ok = await gw.api('POST', `/api/user/${user.id}/2fa/reset`, undefined, admin.token);
    expect(ok.status).toBe(200);
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, user.token)).body.data).toEqual({ enabled: false, backup_codes_remaining: 0 });
    expect((await login(user)).status).toBe(200);

    const peer = await gw.api('POST', `/api/user/${admin2.id}/2fa/reset`, undefined, admin.token);
    expect(peer.status).toBe(403);
    expect(peer.body.error.code).toBe('insufficient_role');
    expect((await gw.api('POST', `/api/user/${root.id}/2fa/reset`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${admin.id}/2fa/reset`, undefined, admin.token)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${root.id}/2fa/reset`)).status).toBe(403);
    expect((await gw.api('POST', `/api/user/${admin2.id}/2fa/reset`)).status).toBe(200);
    expect((await gw.api('POST', '/api/user/999999/2fa/reset')).status).toBe(404);
  });

  test('root can use 2FA like anyone', async () => {
    const root = (await gw.services.users.byUsername('root'))!;
    const r: User = { id: root.id, username: 'root', password: ROOT_PASSWORD, token: gw.rootToken };
    const { secret } = await enable2fa(r);
    expect((await login(r)).body.error.code).toBe('totp_required');
    expect((await login(r, await totp(secret, 0))).status).toBe(200);
    expect((await gw.api('POST', '/api/user/2fa/disable', { code: await totp(secret, 1) })).status).toBe(200);
  });
});
