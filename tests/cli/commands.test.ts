/**
 * The commands that complete the CLI (own 2FA, own profile, password reset, health, metrics,
 * access tokens and their deprecated alias, group help, login token names), each through the CLI
 * subprocess against a real gateway, checked against what the API holds afterwards.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { generate } from 'otplib';
import { encode } from 'uqr';
import { ROOT_PASSWORD, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startSmtp, type TestSmtp } from '../helpers/smtp';
import { cliSandbox, type CliSandbox } from './run-cli';

let smtp: TestSmtp;
let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, RESET_IP_PER_MINUTE: '1000' });
  sb = cliSandbox();
});
afterAll(async () => { await gw.stop(); await smtp.stop(); sb.cleanup(); });

/** Runs the CLI as `token`'s user (root by default). */
const as = (token: string) => (args: string[], stdin?: string) => sb.run(args, { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: token }, stdin });
/** A TOTP code `steps` time steps from now (the server refuses a step it has already seen). */
const totp = (secret: string, steps = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

describe('gw 2fa', () => {
  test('setup draws a QR code and the otpauth URI; enable, status, backup-codes, disable', async () => {
    const u = await makeUser(gw);
    const gwc = as(u.token);
    expect(JSON.parse((await gwc(['2fa', 'status', '--json'])).stdout)).toEqual({ enabled: false, backup_codes_remaining: 0 });

    const setup = await gwc(['2fa', 'setup']);
    expect(setup.code).toBe(0);
    const uri = setup.stdout.split('\n').find((l) => l.startsWith('otpauth://totp/'))!;
    const secret = new URL(uri).searchParams.get('secret')!;
    expect(secret).toMatch(/^[A-Z2-7]+$/);
    // The QR code: rows of half-block characters above the URI, all of the same width.
    const qr = setup.stdout.slice(0, setup.stdout.indexOf(uri)).split('\n').filter(Boolean);
    expect(qr.length).toBeGreaterThan(10);
    expect(qr.every((l) => /^[ ▀▄█]+$/.test(l) && [...l].length === [...qr[0]!].length)).toBe(true);
    // Each character is two modules (upper, lower), drawn where the module is light: reading them back
    // gives exactly the QR matrix of the printed URI.
    const drawn = qr.flatMap((l) => [[...l].map((c) => !'▀█'.includes(c)), [...l].map((c) => !'▄█'.includes(c))]);
    const matrix = encode(uri, { border: 2 }).data;
    expect(drawn.slice(0, matrix.length)).toEqual(matrix);
    expect(setup.stderr).toContain('gw 2fa enable --code');

    // Turning 2FA on needs the password too (a stolen token or session must not): without it, off a terminal,
    // a usage error before any request; a wrong one is the server's refusal, named by the flag that sends it.
    const noPw = await gwc(['2fa', 'enable', '--code', await totp(secret)]);
    expect(noPw.code).toBe(2);
    expect(noPw.stderr).toContain('use --password-stdin');
    const wrongPw = await gwc(['2fa', 'enable', '--code', await totp(secret), '--password-stdin'], 'not-my-password\n');
    expect(wrongPw.code).toBe(1);
    expect(wrongPw.stderr).toBe('error: your current password (--password-stdin, or the prompt on a terminal): The current password is wrong (invalid_current_password)\n');
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.enabled).toBe(false);

    const enabled = await gwc(['2fa', 'enable', '--code', await totp(secret), '--password-stdin'], `${u.password}\n`);
    expect(enabled.code).toBe(0);
    const codes = enabled.stdout.trim().split('\n');
    expect(codes).toHaveLength(10);
    expect(enabled.stderr).toContain('shown only now');
    const status = await gwc(['2fa', 'status']);
    expect(status.stdout).toMatch(/^2fa\s+on$/m);
    expect(status.stdout).toMatch(/^backup codes left\s+10$/m);

    expect((await gwc(['2fa', 'backup-codes', '--code', await totp(secret, 1)])).code).toBe(2);
    const renewed = await gwc(['2fa', 'backup-codes', '--code', await totp(secret, 1), '--password-stdin'], `${u.password}\n`);
    expect(renewed.code).toBe(0);
    expect(renewed.stderr).toContain('Ended 0 other login session(s)');
    const fresh = renewed.stdout.trim().split('\n');
    expect(fresh).toHaveLength(10);
    expect(fresh.some((c) => codes.includes(c))).toBe(false);

    // An old backup code no longer works; a new one turns 2FA off.
    const stale = await gwc(['2fa', 'disable', '--code', codes[0]!]);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toMatch(/^error: --code: .+ \(\w+\)\n$/);
    const off = await gwc(['2fa', 'disable', '--code', fresh[0]!]);
    expect(off.code).toBe(0);
    expect(off.stdout).toBe('Two-factor authentication is off.\n');
    expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data.enabled).toBe(false);
  }, 30_000);

  test('a code is required off a terminal: usage error before any request', async () => {
    const r = await as(gw.rootToken)(['2fa', 'enable']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('missing --code');
  });
});

describe('group help', () => {
  test('a group with no subcommand, and --help, print that group\'s help on stdout and exit 0', async () => {
    for (const args of [['2fa'], ['2fa', '--help'], ['channel'], ['access-token'], []]) {
      const r = await sb.run(args);
      expect(r.code).toBe(0);
      expect(r.stdout).toStartWith(`Usage: gw ${args[0] ? `${args[0]} ` : ''}[options] [command]`);
      expect(r.stderr).toBe('');
    }
    const unknown = await sb.run(['2fa', 'frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command 'frobnicate'");
  });
});

describe('gw profile', () => {
  test('show matches the API; update the display name; an e-mail change needs the current password', async () => {
    const u = await makeUser(gw);
    const gwc = as(u.token);
    expect(JSON.parse((await gwc(['profile', 'show', '--json'])).stdout)).toEqual((await gw.api('GET', '/api/user/self', undefined, u.token)).body.data);
    expect((await gwc(['profile', 'show'])).stdout).toMatch(new RegExp(`^username\\s+${u.username}$`, 'm'));

    const named = await gwc(['profile', 'update', '--display-name', 'Alice B.']);
    expect(named.code).toBe(0);
    expect((await gw.api('GET', '/api/user/self', undefined, u.token)).body.data.display_name).toBe('Alice B.');

    const email = `${u.username}@example.com`;
    const without = await gwc(['profile', 'update', '--email', email]);
    expect(without.code).toBe(1);
    expect(without.stderr).toBe('error: your current password (--password-stdin, or the prompt on a terminal) is required to change the e-mail address (missing_field)\n');
    const wrong = await gwc(['profile', 'update', '--email', email, '--password-stdin'], 'not-my-password\n');
    expect(wrong.code).toBe(1);
    const ok = await gwc(['profile', 'update', '--email', email, '--password-stdin', '--json'], `${u.password}\n`);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout).email).toBe(email);
  });

  test('root renames itself with the current password (PUT /api/user/ refuses its own username)', async () => {
    const r = await makeUser(gw, 100);
    const gwc = as(r.token);
    const without = await gwc(['profile', 'update', '--username', `${r.username}-new`]);
    expect(without.code).toBe(1);
    expect(without.stderr).toBe('error: your current password (--password-stdin, or the prompt on a terminal) is required to change the username (missing_field)\n');
    const ok = await gwc(['profile', 'update', '--username', `${r.username}-new`, '--password-stdin', '--json'], `${r.password}\n`);
    expect([ok.code, JSON.parse(ok.stdout).username]).toEqual([0, `${r.username}-new`]);
  });
});

describe('gw password reset-request / reset', () => {
  test('the e-mailed token sets a password from stdin; without one the gateway generates it', async () => {
    const email = `r${crypto.randomUUID().slice(0, 8)}@example.com`;
    const u = await makeUser(gw, 1, { email });
    const mailedToken = async () => {
      const before = smtp.messages.length;
      const r = await sb.run(['password', 'reset-request', '--url', gw.url, '--email', email]);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`If ${email} belongs to an account`);
      const m = await smtp.waitFor((x) => smtp.messages.indexOf(x) >= before && x.to.includes(email));
      return /[?&]token=([A-Za-z0-9]+)/.exec(m.text)![1]!;
    };

    const bad = await sb.run(['password', 'reset', '--url', gw.url, '--email', email, '--reset-token', 'nope', '--password-stdin'], { stdin: 'whatever-password-1\n' });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toStartWith('error: --reset-token: ');

    const set = await sb.run(['password', 'reset', '--url', gw.url, '--email', email, '--reset-token', await mailedToken(), '--password-stdin'], { stdin: 'reset-password-789\n' });
    expect(set.code).toBe(0);
    expect(set.stdout).toContain('Password reset');
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: 'reset-password-789' }, null)).status).toBe(200);

    // The token from stdin (a flag shows in ps and history), then the password.
    const fromStdin = await sb.run(['password', 'reset', '--url', gw.url, '--email', email, '--token-stdin'], { stdin: `${await mailedToken()}\nstdin-password-456\n` });
    expect(fromStdin.code).toBe(0);
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: 'stdin-password-456' }, null)).status).toBe(200);
    const mixed = await sb.run(['password', 'reset', '--url', gw.url, '--email', email, '--token-stdin', '--reset-token', 'x']);
    expect([mixed.code, mixed.stderr]).toEqual([2, expect.stringContaining('--token-stdin reads both')]);
    const none = await sb.run(['password', 'reset', '--url', gw.url, '--email', email]);
    expect([none.code, none.stderr]).toEqual([2, expect.stringContaining('--token-stdin')]);

    const generated = await sb.run(['password', 'reset', '--url', gw.url, '--email', email, '--reset-token', await mailedToken()]);
    expect(generated.code).toBe(0);
    const pw = generated.stdout.trim();
    expect(generated.stderr).toContain('shown only now');
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: pw }, null)).status).toBe(200);
  }, 30_000);
});

describe('gw health / gw metrics', () => {
  test('health: 0 without any login, 3 when unreachable', async () => {
    const ok = await sb.run(['health', '--url', gw.url]);
    expect(ok).toEqual({ code: 0, stdout: `ok: ${gw.url}\n`, stderr: '' });
    expect(JSON.parse((await sb.run(['health', '--url', gw.url, '--json'])).stdout)).toEqual({ status: 'ok' });
    const down = await sb.run(['health', '--url', 'http://127.0.0.1:9']);
    expect(down.code).toBe(3);
    expect(down.stderr).toContain('cannot reach the gateway at http://127.0.0.1:9');
  });

  test('metrics: the Prometheus text for admins; refused (1) for a plain user', async () => {
    const r = await as(gw.rootToken)(['metrics']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^# TYPE gateway_http_requests_total counter$/m);
    const u = await makeUser(gw);
    const refused = await as(u.token)(['metrics']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('(insufficient_role)');
  });
});

describe('gw access-token and the deprecated gw token', () => {
  test('token still works with a notice on stderr, and is hidden from the help', async () => {
    const old = await as(gw.rootToken)(['token', 'list', '--json']);
    expect(old.code).toBe(0);
    expect(old.stderr).toBe('notice: `gw token` is deprecated; use `gw access-token` (relay API keys are `gw key`)\n');
    expect(JSON.parse(old.stdout)).toEqual(JSON.parse((await as(gw.rootToken)(['access-token', 'list', '--json'])).stdout));
    const help = (await sb.run(['--help'])).stdout;
    expect(help).toMatch(/^\s+access-token\b/m);
    expect(help).not.toMatch(/^\s+token\b/m);
  });

  test('every login names its token apart (host, UTC minute, random suffix); --token-name overrides', async () => {
    const own = cliSandbox();
    try {
      const login = (extra: string[] = []) => own.run(['login', '--url', gw.url, '-u', 'root', '--password-stdin', ...extra], { stdin: `${ROOT_PASSWORD}\n` });
      const names: string[] = [];
      for (let i = 0; i < 2; i++) {
        expect((await login()).code).toBe(0);
        const id = JSON.parse(readFileSync(own.configPath, 'utf8')).token_id;
        const rows = (await gw.api('GET', '/api/user/access_token')).body.data as { id: number; name: string }[];
        names.push(rows.find((t) => t.id === id)!.name);
      }
      for (const n of names) expect(n).toMatch(/^gw-cli@\S+ \d{4}-\d\d-\d\dT\d\d:\d\dZ [0-9a-f]{6}$/);
      expect(names[0]).not.toBe(names[1]);
      expect((await login(['--token-name', 'laptop-ops'])).code).toBe(0);
      const id = JSON.parse(readFileSync(own.configPath, 'utf8')).token_id;
      expect((await gw.api('GET', '/api/user/access_token')).body.data.find((t: any) => t.id === id).name).toBe('laptop-ops');
    } finally {
      own.cleanup();
    }
  });
});
