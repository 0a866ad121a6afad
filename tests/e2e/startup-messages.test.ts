/**
 * What a real gateway process says at start-up about its root user and its database file, and the
 * offline root password recovery command (`bun run --silent admin reset-root-password`).
 */
import { afterAll, describe, expect, test } from 'bun:test';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callJson, loginToken, startGatewayProcess } from '../helpers/gateway-process';

const ROOT = join(import.meta.dir, '..', '..');
const base = mkdtempSync(join(tmpdir(), 'gw-startup-msg-'));
const procs = new Set<Bun.Subprocess>();
afterAll(() => {
  for (const p of procs) p.kill(9);
  rmSync(base, { recursive: true, force: true });
});

const envFor = (db: string, extra: Record<string, string | undefined> = {}) => ({ DATABASE_URL: `sqlite:${db}`, PORT: '0', HOST: '127.0.0.1', ROOT_PASSWORD: undefined, ...extra });

/** Starts a gateway, reads stdout until it listens, stops it (SIGTERM); returns every line it printed. */
async function startupLines(env: Record<string, string | undefined>): Promise<string[]> {
  const p = Bun.spawn([process.execPath, 'run', 'apps/server/src/index.ts'], { cwd: ROOT, env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'pipe' });
  procs.add(p);
  let out = '';
  const dec = new TextDecoder();
  const reader = p.stdout.getReader();
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline && !/ listening url=/.test(out)) {
    const { done, value } = await Promise.race([reader.read(), Bun.sleep(15_000).then(() => ({ done: true, value: undefined }))]);
    if (done) break;
    out += dec.decode(value);
  }
  p.kill(/ listening url=/.test(out) ? 'SIGTERM' : 'SIGKILL');
  const err = new Response(p.stderr).text();
  for (let r = await reader.read(); !r.done; r = await reader.read()) out += dec.decode(r.value);
  await p.exited;
  const lines = (out + '\n' + (await err)).split('\n').filter((l) => l.trim());
  if (!lines.some((l) => l.includes(' listening url='))) throw new Error(`gateway did not start: ${lines.join('\n')}`);
  return lines;
}

/** Runs a process to its end; returns exit code and output lines. */
async function run(cmd: string[], env: Record<string, string | undefined> = {}, stdin?: string) {
  const p = Bun.spawn(cmd, { cwd: ROOT, env: { ...process.env, ...env }, stdin: stdin === undefined ? 'ignore' : new TextEncoder().encode(stdin), stdout: 'pipe', stderr: 'pipe' });
  procs.add(p);
  const timer = setTimeout(() => p.kill(9), 20_000);
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  clearTimeout(timer);
  const split = (s: string) => s.split('\n').filter((l) => l.trim());
  return { code, out: split(out), err: split(err) };
}
const admin = (args: string[], env: Record<string, string | undefined> = {}, stdin?: string) =>
  run([process.execPath, 'run', '--silent', 'admin', ...args], { DATABASE_URL: undefined, ...env }, stdin);
const gateway = (env: Record<string, string | undefined>) => run([process.execPath, 'run', 'apps/server/src/index.ts'], env);

describe('the root user at start-up', () => {
  test('a fresh database without ROOT_PASSWORD prints the generated password once', async () => {
    const all = await startupLines(envFor(join(base, 'generated', 'gw.db')));
    const created = all.filter((l) => / root\./.test(l));
    expect(created).toHaveLength(1);
    expect(created[0]).toMatch(/ info root\.created user=root password=\S{16,} msg=/);
  });

  const db = join(base, 'root', 'gw.db');
  test('a fresh database with ROOT_PASSWORD says the root user was created with it, and prints no password', async () => {
    const all = await startupLines(envFor(db, { ROOT_PASSWORD: 'chosen-root-pw-1' }));
    const created = all.filter((l) => / root\./.test(l));
    expect(created).toHaveLength(1);
    expect(created[0]).toMatch(/ info root\.created user=root msg="root user 'root' created with the password from ROOT_PASSWORD"$/);
    expect(all.join('\n')).not.toContain('chosen-root-pw-1');
  });

  test('ROOT_PASSWORD on an existing database is ignored, and start-up says so in one line without the secret', async () => {
    const all = await startupLines(envFor(db, { ROOT_PASSWORD: 'another-root-pw-2' }));
    const ignored = all.filter((l) => l.includes('ROOT_PASSWORD'));
    expect(ignored).toHaveLength(1);
    expect(ignored[0]).toMatch(/ warn root\.password_ignored .*ROOT_PASSWORD is ignored/);
    expect(all.join('\n')).not.toContain('another-root-pw-2');
    expect(all.some((l) => l.includes('root.created'))).toBe(false);
  });
});

describe('reset-root-password', () => {
  const db = join(base, 'reset', 'gw.db');
  test('generates a password once, ends root sessions and tokens; refused while a gateway holds the database', async () => {
    const g = await startGatewayProcess(envFor(db, { ROOT_PASSWORD: 'first-root-pw-1' }), procs);
    const token = await loginToken(g.url, 'root', 'first-root-pw-1');
    expect((await callJson(g.url, 'GET', '/api/user/self', undefined, token)).status).toBe(200);

    const busy = await admin(['reset-root-password', '--database-url', `sqlite:${db}`]);
    expect(busy.code).toBe(1);
    expect(busy.err).toHaveLength(1);
    expect(busy.err[0]).toMatch(/^reset-root-password failed: another gateway process \(pid \d+\) is using this database .*stop it, then run this again$/);
    g.proc.kill('SIGTERM');
    await g.proc.exited;

    const r = await admin(['reset-root-password'], { DATABASE_URL: `sqlite:${db}` });
    expect(r.code).toBe(0);
    expect(r.out).toHaveLength(1);
    const generated = /new password (\S+) \(shown once\); 1 session\(s\) ended, 1 access token\(s\) revoked$/.exec(r.out[0]!)?.[1];
    expect(generated).toBeString();

    const g2 = await startGatewayProcess(envFor(db), procs);
    expect((await callJson(g2.url, 'GET', '/api/user/self', undefined, token)).status).toBe(401);
    expect((await callJson(g2.url, 'POST', '/api/user/login', { username: 'root', password: 'first-root-pw-1' })).status).toBe(401);
    const fresh = await loginToken(g2.url, 'root', generated!);
    expect((await callJson(g2.url, 'GET', '/api/user/self', undefined, fresh)).body.data.username).toBe('root');
    g2.proc.kill('SIGTERM');
    await g2.proc.exited;

    const fromStdin = await admin(['reset-root-password', '--database-url', `sqlite:${db}`, '--password-stdin'], {}, 'stdin-root-pw-3\n');
    expect(fromStdin.code).toBe(0);
    expect(fromStdin.out[0]).toMatch(/^root user 'root': password set from stdin; \d+ session\(s\) ended, 1 access token\(s\) revoked$/);
    expect(fromStdin.out.join('\n')).not.toContain('stdin-root-pw-3');
    const g3 = await startGatewayProcess(envFor(db), procs);
    expect(await loginToken(g3.url, 'root', 'stdin-root-pw-3')).toStartWith('gwm_');
    g3.proc.kill('SIGTERM');
    await g3.proc.exited;
  }, 60_000);

  test('refuses a missing database (no empty one is created), a short password, and bad usage', async () => {
    const missing = join(base, 'nowhere', 'gw.db');
    const r = await admin(['reset-root-password', '--database-url', `sqlite:${missing}`]);
    expect(r).toMatchObject({ code: 1, err: [`reset-root-password failed: no database at ${missing}`] });
    expect(existsSync(missing)).toBe(false);
    const short = await admin(['reset-root-password', '--database-url', `sqlite:${db}`, '--password-stdin'], {}, 'short\n');
    expect(short.code).toBe(1);
    expect(short.err[0]).toContain('8-128 characters');
    expect((await admin(['frobnicate'])).code).toBe(2);
  }, 30_000);
});

describe('DATABASE_URL that cannot be opened: one line naming the path and the cause', () => {
  test('a folder', async () => {
    const dir = join(base, 'a-folder');
    mkdirSync(dir, { recursive: true });
    const r = await gateway(envFor(dir));
    expect(r.code).toBe(1);
    expect(r.err).toEqual([`Configuration error: DATABASE_URL: cannot open database file ${dir}: is a directory`]);
    // Nothing was written beside it before the refusal (the key file would be).
    expect(existsSync(join(base, 'secret.key'))).toBe(false);
  });

  test('a parent that is a file', async () => {
    const file = join(base, 'plain-file');
    writeFileSync(file, 'x');
    const r = await gateway(envFor(join(file, 'gw.db')));
    expect(r.code).toBe(1);
    expect(r.err).toEqual([`Configuration error: DATABASE_URL: cannot open database file ${join(file, 'gw.db')}: a parent is not a directory`]);
  });

  // Permissions do not apply to root: the process runs as nobody, when this test runs as root with setpriv.
  const asNobody = process.getuid?.() === 0 && Bun.which('setpriv') !== null;
  test.if(asNobody)('a folder this user cannot write', async () => {
    const ro = join(base, 'read-only');
    mkdirSync(ro, { recursive: true });
    chmodSync(base, 0o755);
    chmodSync(ro, 0o755);
    const r = await run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, 'run', 'apps/server/src/index.ts'],
      { ...envFor(join(ro, 'gw.db')), HOME: ro, BUN_INSTALL_CACHE_DIR: join(ro, '.cache') });
    expect(r.code).toBe(1);
    expect(r.err).toEqual([`Configuration error: DATABASE_URL: cannot open database file ${join(ro, 'gw.db')}: permission denied on folder ${ro}`]);
  });
});

describe('HOST that cannot be listened on: one line naming it', () => {
  // Bun reports a name that does not resolve with an unrelated errno (EINVAL, ENOTTY, even EADDRINUSE, which
  // read "port 0 on … is already in use"): the name is resolved first, so the line says what is wrong.
  test('a name that does not resolve', async () => {
    const r = await gateway({ ...envFor(':memory:'), HOST: 'no-such-host.invalid' });
    expect(r.code).toBe(1);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toStartWith('Configuration error: HOST: no-such-host.invalid does not resolve (');
  });

  // 192.0.2.1 is TEST-NET-1 (RFC 5737), an address of no machine's interface.
  test('an address of no interface here', async () => {
    const r = await gateway({ ...envFor(':memory:'), HOST: '192.0.2.1' });
    expect(r.code).toBe(1);
    expect(r.err).toEqual(['Start-up failed: cannot listen on 192.0.2.1 port 0: EADDRNOTAVAIL: address not available, listen']);
  });
});

describe('every documented setting is checked at start-up', () => {
  // TRUST_PROXY was compared with 'true' and '1' only: `yes` or `on` (accepted by every other switch) left the
  // proxy untrusted without a word, and a typo too.
  test('TRUST_PROXY is read like every other switch', async () => {
    const bad = await gateway({ ...envFor(':memory:'), TRUST_PROXY: 'ture' });
    expect(bad.code).toBe(1);
    expect(bad.err).toEqual(['Configuration error: TRUST_PROXY must be true or false, got "ture"']);
    const gw = await startGatewayProcess({ ...envFor(':memory:'), ROOT_PASSWORD: 'root-password-123', TRUST_PROXY: 'yes' }, procs);
    const login = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': '203.0.113.7' },
      body: JSON.stringify({ username: 'root', password: 'root-password-123' }) });
    expect(login.status).toBe(200);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    const sessions = await callJson(gw.url, 'GET', '/api/user/session', undefined, undefined, { cookie });
    expect(sessions.body.data.map((s: { ip: string }) => s.ip)).toEqual(['203.0.113.7']);
    gw.proc.kill('SIGTERM');
    await gw.proc.exited;
  }, 30_000);

  // Behind a proxy that appends to X-Forwarded-For (nginx's usual setting) the leftmost entry is the client's own
  // claim: TRUST_PROXY_HOPS takes the address the operator's outermost proxy saw.
  test('TRUST_PROXY_HOPS takes the entry its proxies added, not the one the client sent', async () => {
    const bad = await gateway({ ...envFor(':memory:'), TRUST_PROXY: 'false', TRUST_PROXY_HOPS: '1' });
    expect(bad.code).toBe(1);
    expect(bad.err).toEqual(['Configuration error: TRUST_PROXY_HOPS=1 needs TRUST_PROXY on (or unset), got TRUST_PROXY="false"']);
    const seen = async (env: Record<string, string>, xff: string) => {
      const gw = await startGatewayProcess({ ...envFor(':memory:'), ROOT_PASSWORD: 'root-password-123', ...env }, procs);
      const login = await fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': xff },
        body: JSON.stringify({ username: 'root', password: 'root-password-123' }) });
      expect(login.status).toBe(200);
      const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
      const ip = (await callJson(gw.url, 'GET', '/api/user/session', undefined, undefined, { cookie })).body.data[0].ip;
      gw.proc.kill('SIGTERM');
      await gw.proc.exited;
      return ip;
    };
    // The client claimed 6.6.6.6; one appending proxy added 203.0.113.7, a second one 10.0.0.2.
    expect(await seen({ TRUST_PROXY_HOPS: '1' }, '6.6.6.6, 203.0.113.7')).toBe('203.0.113.7');
    expect(await seen({ TRUST_PROXY: 'true', TRUST_PROXY_HOPS: '2' }, '6.6.6.6, 203.0.113.7, 10.0.0.2')).toBe('203.0.113.7');
    expect(await seen({ TRUST_PROXY_HOPS: '3' }, '203.0.113.7, 10.0.0.2')).toBe('203.0.113.7');
    // TRUST_PROXY alone is one appending proxy (the rightmost entry); the leftmost only when asked for (0).
    expect(await seen({ TRUST_PROXY: 'true' }, '6.6.6.6, 203.0.113.7')).toBe('203.0.113.7');
    expect(await seen({ TRUST_PROXY: 'true', TRUST_PROXY_HOPS: '0' }, '6.6.6.6, 203.0.113.7')).toBe('6.6.6.6');
  }, 60_000);

  // TRUST_PROXY alone took the leftmost entry before; the rightmost now, which start-up says once.
  test('TRUST_PROXY without TRUST_PROXY_HOPS says which entry it takes', async () => {
    const lines = await startupLines({ ...envFor(':memory:'), TRUST_PROXY: 'true', TRUST_PROXY_HOPS: undefined });
    expect(lines.filter((l) => l.includes('trust_proxy.rightmost')).length).toBe(1);
    const set = await startupLines({ ...envFor(':memory:'), TRUST_PROXY: 'true', TRUST_PROXY_HOPS: '2' });
    expect(set.filter((l) => l.includes('trust_proxy.'))).toEqual([]);
    const off = await startupLines({ ...envFor(':memory:'), TRUST_PROXY: undefined, TRUST_PROXY_HOPS: undefined });
    expect(off.filter((l) => l.includes('trust_proxy.'))).toEqual([]);
  }, 45_000);

  // The secret alone was ignored without a word: an operator who misspelt ALERT_WEBHOOK_URL got no alerts.
  test('ALERT_WEBHOOK_SECRET without ALERT_WEBHOOK_URL is said at start-up, without the secret', async () => {
    const secret = 'alert-secret-0123456789';
    const lines = await startupLines({ ...envFor(':memory:'), ALERT_WEBHOOK_SECRET: secret, ALERT_WEBHOOK_URL: undefined });
    const said = lines.filter((l) => l.includes('alert.webhook_url_unset'));
    expect(said.length).toBe(1);
    expect(said[0]).toContain('ALERT_WEBHOOK_URL is not');
    expect(lines.join('\n')).not.toContain(secret);
    const quiet = await startupLines(envFor(':memory:'));
    expect(quiet.filter((l) => l.includes('alert.'))).toEqual([]);
  }, 30_000);

  // A payment provider's optional settings were read only once its secrets were set: a typo in them started
  // fine and stopped a later start-up, the day the secrets were added.
  test.each([
    ['PROVIDER_A_WEBHOOK_TOLERANCE', 'abc', 'PROVIDER_A_WEBHOOK_TOLERANCE must be an integer, got "abc"'],
    ['PROVIDER_A_API_BASE', 'api.stripe.com', 'PROVIDER_A_API_BASE must be an absolute http(s) URL, got "api.stripe.com"'],
    ['PROVIDER_B_API_BASE', 'ftp://x', 'PROVIDER_B_API_BASE must be an http(s) URL, got "ftp://x"'],
    ['PROVIDER_B_UNIT_AMOUNT', '0', 'PROVIDER_B_UNIT_AMOUNT must be between 1 and 100000000, got 0'],
  ])('%s=%s without the provider configured', async (name, value, message) => {
    const r = await gateway({ ...envFor(':memory:'), [name]: value });
    expect(r.code).toBe(1);
    expect(r.err).toEqual([`Configuration error: ${message}`]);
  });
});

test('the listening line gives a URL that works, also for an IPv6 HOST', async () => {
  // It printed http://::1:PORT, which no client parses: an IPv6 address in a URL goes in brackets.
  const lines = await startupLines({ ...envFor(':memory:'), HOST: '::1' });
  const url = / listening url=(\S+)/.exec(lines.find((l) => l.includes(' listening url='))!)![1]!;
  expect(url).toMatch(/^http:\/\/\[::1\]:\d+$/);
});
