import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { generate } from 'otplib';
import { ConfigError } from '@gw/config';
import { SecretBox, localWindows, type AttemptWindows } from '@gw/core';
import { SecurityRepo, UsersRepo, openDatabase, type DbHandle } from '@gw/db';
import { CurrentPasswordGuard } from './current-password';
import type { Principal } from './principal';
import { hashPassword } from './passwords';
import { TwoFactorService, twoFactorConfig } from './two-factor';

let dbh: DbHandle;
let users: UsersRepo;
let now: number;
let svc: TwoFactorService;
beforeEach(() => {
  dbh = openDatabase(':memory:');
  users = new UsersRepo(dbh.db);
  // A fixed clock in the middle of a 30 s step, so ±1 step boundaries are exact.
  now = 1_800_000_015_000;
  svc = new TwoFactorService(users, new SecurityRepo(dbh.db), new SecretBox(new Uint8Array(32).fill(7)), twoFactorConfig({}), new CurrentPasswordGuard(() => now), () => now);
});
afterEach(() => dbh.close());

const PASSWORD = 'the-password-1';
let passwordHash: string;
const newUser = async () => users.insert({ username: `u${crypto.randomUUID().slice(0, 6)}`, passwordHash: (passwordHash ??= await hashPassword(PASSWORD)), createdAt: 0, updatedAt: 0 });
const viaToken = async (id: number): Promise<Principal> => ({ user: (await users.byId(id))!, via: 'token', tokenId: 1 });
const code = (secret: string, steps: number) => generate({ secret, epoch: Math.floor(now / 1000) + steps * 30 });

async function enabled() {
  const u = await newUser();
  const { secret } = await svc.setup(u.id);
  const { backup_codes } = await svc.enable(await viaToken(u.id), PASSWORD, await code(secret, 0));
  return { u: (await users.byId(u.id))!, secret, backup_codes };
}

describe('TOTP verification', () => {
  test('accepts the previous, current and next step; refuses two steps away', async () => {
    const { u, secret } = await enabled();
    now += 90_000; // three steps later, so the enable step is out of the way
    expect(await svc.checkLoginCode(u, await code(secret, -2))).toBe(false);
    expect(await svc.checkLoginCode(u, await code(secret, 2))).toBe(false);
    expect(await svc.checkLoginCode(u, await code(secret, -1))).toBe(true);
    expect(await svc.checkLoginCode(u, await code(secret, 0))).toBe(true);
    expect(await svc.checkLoginCode(u, await code(secret, 1))).toBe(true);
  });

  test('a step is accepted once, and never an older one after it', async () => {
    const { u, secret } = await enabled();
    now += 30_000;
    const c = await code(secret, 0);
    expect(await svc.checkLoginCode(u, c)).toBe(true);
    expect(await svc.checkLoginCode(u, c)).toBe(false);
    expect(await svc.checkLoginCode(u, await code(secret, -1))).toBe(false);
    expect((await users.byId(u.id))!.totpLastStep).toBe(Math.floor(now / 30_000));
  });

  test('wrong lengths, non-digits and a clock behind the last step are refusals, not exceptions', async () => {
    const { u, secret } = await enabled();
    for (const bad of ['', '1', '12345', '1234567', '12a456', '١٢٣٤٥٦']) expect(await svc.checkLoginCode(u, bad)).toBe(false);
    now -= 10 * 60_000; // clock moved back 10 minutes: otplib throws AfterTimeStepRangeExceededError
    expect(await svc.checkLoginCode(u, await code(secret, 0))).toBe(false);
    await expect(svc.disable(u.id, await code(secret, 0))).rejects.toMatchObject({ status: 400, code: 'invalid_totp' });
  });

  test('the secret is stored sealed and setup does not switch 2FA on', async () => {
    const u = await newUser();
    const s = await svc.setup(u.id);
    const row = (await users.byId(u.id))!;
    expect(row.totpEnabled).toBe(false);
    expect(row.totpSecret!.startsWith('v1.')).toBe(true);
    expect(row.totpSecret).not.toContain(s.secret);
    expect(s.otpauth_uri).toContain('issuer=AI%20Gateway');
  });

  test('a backup code works once at login', async () => {
    const { u, backup_codes } = await enabled();
    expect(await svc.checkLoginCode(u, backup_codes[4]!)).toBe(true);
    expect(await svc.checkLoginCode(u, backup_codes[4]!)).toBe(false);
    expect(await svc.status(u.id)).toEqual({ enabled: true, backup_codes_remaining: 9 });
  });
});

describe('twoFactorConfig', () => {
  test('TOTP_ISSUER default and validation', () => {
    expect(twoFactorConfig({}).issuer).toBe('AI Gateway');
    expect(twoFactorConfig({ TOTP_ISSUER: ' Acme ' }).issuer).toBe('Acme');
    expect(() => twoFactorConfig({ TOTP_ISSUER: 'a:b' })).toThrow(ConfigError);
  });

  test('long-term guess limits: 20 a day and 60 in 30 days by default; bad values are refused at start', () => {
    expect(twoFactorConfig({})).toMatchObject({ maxFailuresPerDay: 20, maxFailuresPer30Days: 60 });
    expect(twoFactorConfig({ TOTP_MAX_FAILURES_PER_DAY: '5', TOTP_MAX_FAILURES_PER_30_DAYS: '30' })).toMatchObject({ maxFailuresPerDay: 5, maxFailuresPer30Days: 30 });
    for (const bad of ['0', '-1', 'many']) expect(() => twoFactorConfig({ TOTP_MAX_FAILURES_PER_DAY: bad })).toThrow(ConfigError);
  });
});

describe('guessing limit', () => {
  test('parallel wrong codes on a shared window (a round trip per call) get 10 checks, not one each', async () => {
    // A window like the Redis one: every call answers a few milliseconds later.
    const slow: AttemptWindows = (name, ms, clock) => {
      const w = localWindows(name, ms, clock);
      const later = <T>(p: Promise<T>) => Bun.sleep(3).then(() => p);
      return { count: (k) => later(w.count(k)), hit: (k, l) => later(w.hit(k, l)), reset: (k) => later(w.reset(k)) };
    };
    svc = new TwoFactorService(users, new SecurityRepo(dbh.db), new SecretBox(new Uint8Array(32).fill(7)), twoFactorConfig({}), new CurrentPasswordGuard(() => now), () => now, slow);
    const { u, secret } = await enabled();
    const near = new Set(await Promise.all([-1, 0, 1].map((s) => code(secret, s))));
    const guesses = Array.from({ length: 40 }, (_, i) => String(100_000 + i * 7919)).filter((g) => !near.has(g));
    const outcomes = await Promise.all(guesses.map((g) => svc.disable(u.id, g).then(() => 'ok', (e) => e.code as string)));
    expect(outcomes.filter((o) => o === 'invalid_totp')).toHaveLength(10);
    expect(outcomes.filter((o) => o === 'too_many_attempts')).toHaveLength(guesses.length - 10);
    // The right code waits for the window too; a success clears it.
    await expect(svc.disable(u.id, await code(secret, 1))).rejects.toMatchObject({ code: 'too_many_attempts' });
    now += 5 * 60_000 + 1;
    await svc.disable(u.id, await code(secret, 0));
    expect((await svc.status(u.id)).enabled).toBe(false);
  });

  test('past the five-minute window, checks are capped per day and per 30 days, per credential; a login lifts neither', async () => {
    const { u, secret } = await enabled();
    const wrong = async () => svc.disable(u.id, '000000').then(() => 'ok', (e) => e.code as string);
    // Ten per five minutes, but only 20 a day: the third burst of the day is refused.
    for (const expected of ['invalid_totp', 'invalid_totp', 'too_many_attempts']) {
      const outcomes = [];
      for (let i = 0; i < 10; i++) outcomes.push(await wrong());
      expect(outcomes.every((o) => o === expected)).toBe(true);
      now += 10 * 60_000;
    }
    const dayLock = await svc.disable(u.id, '000000').catch((e) => e);
    expect(Number(dayLock.headers['retry-after'])).toBeGreaterThan(300);
    // Two more days of 20 each, then the 30-day cap (60) refuses for longer than a day.
    for (let day = 0; day < 2; day++) {
      now += 2 * 86_400_000;
      for (let burst = 0; burst < 2; burst++) {
        for (let i = 0; i < 10; i++) expect(await wrong()).toBe('invalid_totp');
        now += 10 * 60_000;
      }
    }
    now += 2 * 86_400_000;
    const monthLock = await svc.disable(u.id, '000000').catch((e) => e);
    expect(monthLock.code).toBe('too_many_attempts');
    expect(Number(monthLock.headers['retry-after'])).toBeGreaterThan(86_400);
    // The owner logs in with the password and a code: the locked credential stays locked (a login used to clear
    // the account's counts); the new login's session, like any other credential of the owner, has checks of its own.
    now += 30_000;
    expect(await svc.checkLoginCode(u, await code(secret, 0))).toBe(true);
    expect(await wrong()).toBe('too_many_attempts');
    await expect(svc.disable(u.id, '000000', 'sfreshsession')).rejects.toMatchObject({ code: 'invalid_totp' });
  });

  test('the lockout says once per day that it is the first (the owner is mailed then)', async () => {
    const { u } = await enabled();
    const firsts = [];
    for (let i = 0; i < 14; i++) {
      const e = await svc.disable(u.id, '000000').catch((x) => x);
      if (e.code === 'too_many_attempts') firsts.push(e.firstInDay);
    }
    expect(firsts).toEqual([true, false, false, false]);
  });
});
