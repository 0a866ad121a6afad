import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { chmodSync, existsSync, readFileSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { generate } from 'otplib';
import { ROOT_PASSWORD, makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

describe('gw login / whoami / access-token / logout', () => {
  test('login reads the password from stdin and stores a working token with 0600 permissions', async () => {
    const r = await sb.run(['login', '--url', `${gw.url}/`, '-u', 'root', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Logged in to');
    const cfg = JSON.parse(readFileSync(sb.configPath, 'utf8'));
    expect(cfg.url).toBe(gw.url); // trailing slash normalised away
    expect(cfg.token).toStartWith('gwm_');
    expect(r.stdout).not.toContain(cfg.token);
    expect(statSync(sb.configPath).mode & 0o777).toBe(0o600);
    expect(statSync(dirname(sb.configPath)).mode & 0o777).toBe(0o700);
    // The stored token is a real management token, and the login session was ended after minting it.
    expect((await gw.api('GET', '/api/user/self', undefined, cfg.token)).body.data.username).toBe('root');
    const root = (await gw.services.users.byUsername('root'))!;
    expect((await gw.db.get('select count(*) as n from sessions where user_id = ?', root.id))).toEqual({ n: 0 });
  });

  test('whoami prints a table by default and the exact data with --json', async () => {
    const human = await sb.run(['whoami']);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^user\s+root \(id 1\)$/m);
    expect(human.stdout).toMatch(/^role\s+root$/m);
    const json = await sb.run(['whoami', '--json']);
    expect(json.code).toBe(0);
    const self = (await gw.api('GET', '/api/user/self')).body.data;
    expect(JSON.parse(json.stdout)).toEqual(self);
  });

  test('login-session lists the browser sessions, ends one, and ends all others; a malformed id is a usage error', async () => {
    const browser = async (ua: string) => (await fetch(`${gw.url}/api/user/login`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'user-agent': ua }, body: JSON.stringify({ username: 'root', password: ROOT_PASSWORD }),
    })).headers.get('set-cookie')!.split(';')[0]!;
    const self = (cookie: string) => fetch(`${gw.url}/api/user/self`, { headers: { cookie } }).then((r) => r.status);
    const laptop = await browser('cli-test-laptop');
    const phone = await browser('cli-test-phone');
    const list = await sb.run(['login-session', 'list', '--json']);
    expect(list.code).toBe(0);
    const rows = JSON.parse(list.stdout) as any[];
    expect(rows.map((r) => r.user_agent).sort()).toEqual(['cli-test-laptop', 'cli-test-phone']);
    const human = await sb.run(['login-session', 'list']);
    expect(human.stdout).toMatch(/^ID\s+CREATED\s+EXPIRES\s+IP\s+USER AGENT\s+CURRENT/m);
    expect(human.stdout).toContain('cli-test-phone');

    const bad = await sb.run(['login-session', 'end', 'not-an-id']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('16 lowercase hex characters');
    const id = rows.find((r) => r.user_agent === 'cli-test-phone').id;
    // Ending another session needs the password: none off a terminal is a usage error before any request.
    const bare = await sb.run(['login-session', 'end', id]);
    expect([bare.code, bare.stderr]).toEqual([2, expect.stringContaining('use --password-stdin')]);
    expect(await self(phone)).toBe(200);
    const wrong = await sb.run(['login-session', 'end', id, '--password-stdin'], { stdin: 'not-the-password\n' });
    expect([wrong.code, wrong.stderr]).toEqual([1, expect.stringContaining('(invalid_current_password)')]);
    expect(await self(phone)).toBe(200);
    const ended = await sb.run(['login-session', 'end', id, '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect([ended.code, ended.stdout]).toEqual([0, `Ended login session ${id}.\n`]);
    expect(await self(phone)).toBe(401);
    expect(await self(laptop)).toBe(200);

    // With the CLI's access token every session is "another" one.
    const noPassword = await sb.run(['login-session', 'end-others']);
    expect([noPassword.code, noPassword.stderr]).toEqual([2, expect.stringContaining('use --password-stdin')]);
    expect(await self(laptop)).toBe(200);
    const others = await sb.run(['login-session', 'end-others', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect([others.code, others.stdout]).toEqual([0, 'Ended 1 login session.\n']);
    expect(await self(laptop)).toBe(401);
  }, 30_000);

  test('access-token create prints the token once on stdout; list shows only prefixes; revoke works', async () => {
    // A new token needs the password: none off a terminal is a usage error before any request, a wrong one the server's refusal.
    const bare = await sb.run(['access-token', 'create', '--name', 'ci-token']);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain('use --password-stdin');
    const wrong = await sb.run(['access-token', 'create', '--name', 'ci-token', '--password-stdin'], { stdin: 'not-the-password\n' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toBe('error: your current password (--password-stdin, or the prompt on a terminal): The current password is wrong (invalid_current_password)\n');
    const created = await sb.run(['access-token', 'create', '--name', 'ci-token', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect(created.code).toBe(0);
    const token = created.stdout.trim();
    expect(token).toStartWith('gwm_');
    expect(created.stderr).toContain('shown only now');
    expect((await gw.api('GET', '/api/user/self', undefined, token)).status).toBe(200);

    const list = await sb.run(['access-token', 'list', '--json']);
    const rows = JSON.parse(list.stdout) as any[];
    const row = rows.find((t) => t.name === 'ci-token');
    expect(row.prefix).toBe(token.slice(0, 10));
    expect(list.stdout).not.toContain(token);

    const unrevoked = await sb.run(['access-token', 'revoke', String(row.id)]);
    expect([unrevoked.code, unrevoked.stderr]).toEqual([2, expect.stringContaining('use --password-stdin')]);
    expect((await gw.api('GET', '/api/user/self', undefined, token)).status).toBe(200);
    const revoked = await sb.run(['access-token', 'revoke', String(row.id), '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toBe(`Revoked access token ${row.id}.\n`);
    expect((await gw.api('GET', '/api/user/self', undefined, token)).status).toBe(401);
  }, 30_000);

  test('a request the server refuses exits 1 with the server message and code on stderr', async () => {
    const r = await sb.run(['access-token', 'revoke', '99999', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('error: No access token 99999 (token_not_found)\n');
  });

  test('usage errors exit 2: unknown command, unknown flag, bad argument, missing value', async () => {
    const results = await Promise.all([
      sb.run(['frobnicate']),
      sb.run(['whoami', '--bogus']),
      sb.run(['access-token', 'revoke', 'abc']),
      sb.run(['access-token', 'revoke']),
    ]);
    for (const r of results) {
      expect(r.code).toBe(2);
      expect(r.stderr).toStartWith('error: ');
      expect(r.stdout).toBe('');
    }
    expect(results[0]!.stderr).toContain("unknown command 'frobnicate'");
    expect(results[1]!.stderr).toContain("unknown option '--bogus'");
  });

  test('flags and env override the file; the stored token is never sent to another URL', async () => {
    // An invalid token from the environment beats the valid one in the file: the server refuses it.
    const env = await sb.run(['whoami'], { env: { GATEWAY_TOKEN: 'gwm_not-a-real-token' } });
    expect(env.code).toBe(1);
    expect(env.stderr).toContain('(invalid_access_token)');
    // A --token flag beats the environment.
    const flag = await sb.run(['whoami', '--json', '--token', gw.rootToken], { env: { GATEWAY_TOKEN: 'gwm_not-a-real-token' } });
    expect(flag.code).toBe(0);
    // --url to some other gateway: the file's token is not sent there. Nothing listens on that port, and
    // an unreachable gateway is exit 3 with or without a token.
    const other = await sb.run(['whoami', '--url', 'http://127.0.0.1:9']);
    expect(other.code).toBe(3);
    expect(other.stderr).toContain('cannot reach the gateway at http://127.0.0.1:9');
  });

  test('an unreachable gateway exits 3 and says so', async () => {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    const r = await sb.run(['whoami', '--url', 'http://127.0.0.1:9', '--token', 'gwm_x']);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('cannot reach the gateway at http://127.0.0.1:9');
  });

  test('help has an example and exits 0', async () => {
    const r = await sb.run(['login', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Examples:');
    expect(r.stdout).toContain('--password-stdin');
  });

  test('logging in again replaces (and revokes) the stored token; loose file permissions are warned about', async () => {
    const before = JSON.parse(readFileSync(sb.configPath, 'utf8')).token as string;
    const again = await sb.run(['login', '-u', 'root', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n` });
    expect(again.code).toBe(0); // the URL came from the file this time
    const after = JSON.parse(readFileSync(sb.configPath, 'utf8')).token as string;
    expect(after).not.toBe(before);
    expect((await gw.api('GET', '/api/user/self', undefined, before)).status).toBe(401);
    chmodSync(sb.configPath, 0o644);
    const warned = await sb.run(['whoami']);
    expect(warned.code).toBe(0);
    expect(warned.stderr.match(/readable by other users/g)).toHaveLength(1);
    chmodSync(sb.configPath, 0o600);
  });

  test('logout revokes the token on the server and forgets it locally (the URL stays); whoami then says "not logged in" (1)', async () => {
    const token = JSON.parse(readFileSync(sb.configPath, 'utf8')).token as string;
    const r = await sb.run(['logout']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('access token revoked');
    expect(JSON.parse(readFileSync(sb.configPath, 'utf8'))).toEqual({ url: gw.url });
    expect((await gw.api('GET', '/api/user/self', undefined, token)).status).toBe(401);
    const after = await sb.run(['whoami']);
    expect(after.code).toBe(1);
    expect(after.stderr).toBe(`error: not logged in to ${gw.url}: run \`gw login\`, or pass --token / set GATEWAY_TOKEN (not_logged_in)\n`);
    const again = await sb.run(['logout']);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe('Not logged in.\n');
  });
});

describe('gw password', () => {
  test('changes the password from stdin; a wrong current password is refused (1)', async () => {
    const u = await makeUser(gw);
    const env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: u.token };
    const wrong = await sb.run(['password', '--stdin'], { env, stdin: 'not-the-password\nnew-password-456\n' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toStartWith('error: ');
    const ok = await sb.run(['password', '--stdin'], { env, stdin: `${u.password}\nnew-password-456\n` });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toStartWith('Password changed');
    expect((await gw.api('POST', '/api/user/login', { username: u.username, password: 'new-password-456' }, null)).status).toBe(200);
  });
});

describe('gw login with two-factor authentication', () => {
  test('without a code: exit 1 with totp_required and a hint; with --totp (a backup code): logged in', async () => {
    const u = await makeUser(gw);
    const setup = await gw.api('POST', '/api/user/2fa/setup', undefined, u.token);
    const enabled = await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret: setup.body.data.secret }), current_password: u.password }, u.token);
    expect(enabled.status).toBe(200);
    const backup = enabled.body.data.backup_codes[0] as string;
    const own = cliSandbox();
    try {
      const args = ['login', '--url', gw.url, '-u', u.username, '--password-stdin'];
      const missing = await own.run(args, { stdin: `${u.password}\n` });
      expect(missing.code).toBe(1);
      expect(missing.stderr).toBe('error: --totp: Two-factor code required (totp_required)\n');
      expect(existsSync(own.configPath)).toBe(false);

      const ok = await own.run([...args, '--totp', backup], { stdin: `${u.password}\n` });
      expect(ok.code).toBe(0);
      const who = JSON.parse((await own.run(['whoami', '--json'])).stdout);
      expect(who).toMatchObject({ username: u.username, totp_enabled: true });
    } finally {
      own.cleanup();
    }
  });
});
