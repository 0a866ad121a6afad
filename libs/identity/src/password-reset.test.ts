import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { ConfigError } from '@gw/config';
import { SecurityRepo, UsersRepo, openDatabase, type DbHandle } from '@gw/db';
import { Mailer, mailConfig } from './mailer';
import { PasswordResetService, passwordResetConfig } from './password-reset';

let dbh: DbHandle;
beforeEach(() => { dbh = openDatabase(':memory:'); });
afterEach(() => dbh.close());

describe('PasswordResetService without SMTP', () => {
  test('answers normally, logs that mail is not configured, stores no token', () => {
    const users = new UsersRepo(dbh.db);
    const u = users.insert({ username: 'alice', email: 'alice@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const lines: string[] = [];
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), new Mailer(mailConfig({})), () => 0, passwordResetConfig({}), (l) => lines.push(l));
    svc.request('alice@example.com', '1.2.3.4');
    svc.request('nobody@example.com', '1.2.3.4');
    expect(lines.length).toBe(1);
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
    users.insert({ username: 'bob', email: 'bob@example.com', passwordHash: 'x', createdAt: 0, updatedAt: 0 });
    const lines: string[] = [];
    const mailer = new Mailer(mailConfig({ SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port) }));
    const svc = new PasswordResetService(users, new SecurityRepo(dbh.db), mailer, () => 0, passwordResetConfig({}), (l) => lines.push(l));
    svc.request('bob@example.com', '1.2.3.4');
    expect(lines).toEqual([]);
    for (let i = 0; i < 100 && !lines.length; i++) await Bun.sleep(20);
    expect(lines[0]).toContain('password reset e-mail to user 1 failed');
    mailer.close();
  });
});

describe('passwordResetConfig', () => {
  test('defaults and validation', () => {
    expect(passwordResetConfig({})).toEqual({ ttlSeconds: 900, publicUrl: 'http://localhost:3000', ipPerMinute: 10 });
    expect(passwordResetConfig({ PUBLIC_URL: 'https://gw.example.com/', PORT: '8080' }).publicUrl).toBe('https://gw.example.com');
    expect(passwordResetConfig({ PORT: '8080' }).publicUrl).toBe('http://localhost:8080');
    expect(() => passwordResetConfig({ PUBLIC_URL: 'gw.example.com' })).toThrow(ConfigError);
    expect(() => passwordResetConfig({ PUBLIC_URL: 'ftp://x' })).toThrow(ConfigError);
    expect(() => passwordResetConfig({ RESET_TOKEN_TTL_SECONDS: '0' })).toThrow(ConfigError);
  });
});
