import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { memoryLogger } from '@gw/core';
import { ConfigError } from '@gw/config';
import { SecurityRepo, USER_STATUS, UsersRepo, openDatabase, type DbHandle } from '@gw/db';
import { Mailer, mailConfig } from './mailer';
import { PasswordResetService, passwordResetConfig } from './password-reset';

let dbh: DbHandle;
beforeEach(() => { dbh = openDatabase(':memory:'); });
afterEach(() => dbh.close());

describe('PasswordResetService without SMTP', () => {
  test('answers normally, logs that mail is not configured (in the background), stores no token', async () => {
    const users = new UsersRepo(dbh.db);
    const u = await users.insert({ username: 'alice', email: 'alice@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const { log, lines } = memoryLogger();
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), new Mailer(mailConfig({})), async () => 0, passwordResetConfig({}), log);
    await svc.request('alice@example.com', '1.2.3.4');
    await svc.request('nobody@example.com', '1.2.3.4');
    expect(lines).toEqual([]); // nothing address-dependent happens on the request path
    await svc.idle();
    expect(lines.length).toBe(1);
    expect(lines[0]).toContain('password_reset.mail_off user=1');
    expect(lines[0]).toContain('mail is not configured');
    expect(lines[0]).not.toContain('alice@example.com');
    expect(dbh.sqlite.query('select count(*) as n from password_resets where user_id = ?').get(u.id)).toEqual({ n: 0 });
  });
});

describe('PasswordResetService with an unreachable SMTP server', () => {
  test('the request returns at once; the failed delivery is logged afterwards', async () => {
    // A port that was just free: connections to it are refused.
    const probe = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } });
    const port = probe.port;
    probe.stop(true);
    const users = new UsersRepo(dbh.db);
    await users.insert({ username: 'bob', email: 'bob@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const { log, lines } = memoryLogger();
    const mailer = new Mailer(mailConfig({ SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port) }));
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), mailer, async () => 0, passwordResetConfig({}), log);
    await svc.request('bob@example.com', '1.2.3.4');
    expect(lines).toEqual([]);
    for (let i = 0; i < 100 && !lines.length; i++) await Bun.sleep(20);
    expect(lines[0]).toMatch(/ warn job.retry job="password reset e-mail" attempt=1 retry_ms=\d+ cause="to user 1:/);
    svc.close();
    mailer.close();
  });
});

describe('PasswordResetService delivery queue', () => {
  test('a failed delivery is retried with the same token until the mail server accepts it', async () => {
    const users = new UsersRepo(dbh.db);
    await users.insert({ username: 'carol', email: 'carol@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const sent: string[] = [];
    let failures = 2;
    const mailer = {
      configured: true,
      async send(m: { text: string }) {
        if (failures-- > 0) throw new Error('421 try again later');
        sent.push(m.text);
        return true;
      },
    } as unknown as Mailer;
    const { log, lines } = memoryLogger();
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), mailer, async () => 0, passwordResetConfig({}), log, Date.now, { retryDelaysMs: [10, 10, 10] });
    await svc.request('carol@example.com', '1.2.3.4');
    for (let i = 0; i < 100 && !sent.length; i++) await Bun.sleep(10);
    expect(sent.length).toBe(1);
    expect(lines.filter((l) => l.includes(' job.retry ')).length).toBe(2);
    // One token row for the three attempts: a retry resends, it does not mint another token.
    expect(dbh.sqlite.query('select count(*) as n from password_resets').get()).toEqual({ n: 1 });
    svc.close();
  });

  test('gives up after the last retry with one line, and close() reports unsent mail', async () => {
    const users = new UsersRepo(dbh.db);
    await users.insert({ username: 'dave', email: 'dave@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const mailer = { configured: true, send: async () => { throw new Error('550 no'); } } as unknown as Mailer;
    const { log, lines } = memoryLogger();
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), mailer, async () => 0, passwordResetConfig({}), log, Date.now, { retryDelaysMs: [5] });
    await svc.request('dave@example.com', '1.2.3.4');
    for (let i = 0; i < 100 && !lines.some((l) => l.includes('attempts=2')); i++) await Bun.sleep(10);
    expect(lines.at(-1)).toMatch(/ warn job.failed job="password reset e-mail" attempts=2 cause="to user 1: 550 no/);
    const slow = new PasswordResetService(users, new SecurityRepo(dbh.db), mailer, async () => 0, passwordResetConfig({}), log, Date.now, { retryDelaysMs: [60_000] });
    await slow.request('dave@example.com', '1.2.3.4');
    await slow.idle();
    slow.close();
    expect(lines.at(-1)).toMatch(/ warn job.queue_closed not_done=1$/);
    svc.close();
  });
});

describe('passwordResetConfig', () => {
  test('defaults and validation', () => {
    expect(passwordResetConfig({})).toEqual({ ttlSeconds: 900, publicUrl: 'http://localhost:3000', ipPerMinute: 10, emailsPerHour: 5 });
    expect(passwordResetConfig({ PUBLIC_URL: 'https://gw.example.com/', PORT: '8080' }).publicUrl).toBe('https://gw.example.com');
    expect(passwordResetConfig({ PORT: '8080' }).publicUrl).toBe('http://localhost:8080');
    expect(() => passwordResetConfig({ PUBLIC_URL: 'gw.example.com' })).toThrow(ConfigError);
    expect(() => passwordResetConfig({ PUBLIC_URL: 'ftp://x' })).toThrow(ConfigError);
    expect(() => passwordResetConfig({ RESET_TOKEN_TTL_SECONDS: '0' })).toThrow(ConfigError);
  });
});

describe('PasswordResetService.reset timing', () => {
  // A wrong token must cost the same database work whether or not the address has an account: a lookup skipped
  // for unknown addresses answers them a round trip sooner, which tells an attacker which addresses are registered.
  test('a wrong token looks its token up once for a registered, a disabled and an unknown address alike', async () => {
    const users = new UsersRepo(dbh.db);
    await users.insert({ username: 'erin', email: 'erin@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    await users.insert({ username: 'fred', email: 'fred@example.com', passwordHash: 'x', status: USER_STATUS.disabled, createdAt: 0, updatedAt: 0 });
    const repo = new SecurityRepo(dbh.db);
    const lookups: number[] = [];
    const real = repo.resetTokenValid.bind(repo);
    repo.resetTokenValid = (userId, hash, now) => { lookups.push(userId); return real(userId, hash, now); };
    const { log } = memoryLogger();
    const svc = new PasswordResetService(users, repo, new Mailer(mailConfig({})), async () => 0, passwordResetConfig({}), log);
    for (const email of ['erin@example.com', 'fred@example.com', 'nobody@example.com']) {
      const err = await svc.reset({ email, token: 'not-a-token', password: 'new-password-1' }, '1.2.3.4').catch((e) => e);
      expect(err.status).toBe(400);
      expect(err.code).toBe('invalid_reset_token');
    }
    expect(lookups.length).toBe(3);
    expect(lookups[2]).toBe(0); // the unknown address: an id no row has
    svc.close();
  });
});
