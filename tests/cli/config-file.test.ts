/**
 * The config file holds a live access token. It is written through a temporary file and a rename; that
 * temporary file must be a new one of our own: a file or symlink planted at a guessable name (in a shared
 * folder named by GW_CONFIG or XDG_CONFIG_HOME) must neither receive the token nor be overwritten.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { ROOT_PASSWORD, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

test('login never writes the token through a symlink planted at the temporary file name', async () => {
  mkdirSync(dirname(sb.configPath), { recursive: true, mode: 0o700 });
  const victim = join(sb.dir, 'victim.txt');
  writeFileSync(victim, 'precious\n');
  const proc = Bun.spawn(['bun', 'run', resolve(import.meta.dir, '../../apps/cli/src/index.ts'), 'login', '--url', gw.url, '-u', 'root', '--password-stdin'], {
    cwd: resolve(import.meta.dir, '../..'),
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath },
    stdin: new TextEncoder().encode(`${ROOT_PASSWORD}\n`), stdout: 'pipe', stderr: 'pipe',
  });
  // The name the CLI used to write to (`<config>.<pid>.tmp`) is known as soon as the process exists.
  symlinkSync(victim, `${sb.configPath}.${proc.pid}.tmp`);
  const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });

  expect(readFileSync(victim, 'utf8')).toBe('precious\n');
  const cfg = lstatSync(sb.configPath);
  expect(cfg.isFile()).toBe(true);
  expect(cfg.mode & 0o777).toBe(0o600);
  expect(JSON.parse(readFileSync(sb.configPath, 'utf8')).token).toStartWith('gwm_');
  // No temporary file of ours is left behind (the planted link is the caller's business).
  expect(readdirSync(dirname(sb.configPath)).filter((n) => n.endsWith('.tmp') && !n.includes(`.${proc.pid}.tmp`))).toEqual([]);
});

test('GATEWAY_TOKEN set with GATEWAY_URL is not sent to another gateway named by --url', async () => {
  const seen: (string | null)[] = [];
  const other = Bun.serve({
    port: 0, hostname: '127.0.0.1',
    fetch: (req) => {
      seen.push(req.headers.get('authorization'));
      return Response.json({ success: false, error: { message: 'Unauthorized', code: 'unauthorized' } }, { status: 401 });
    },
  });
  try {
    const env = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
    const r = await sb.run(['whoami', '--url', `http://127.0.0.1:${other.port}`], { env });
    expect(seen).toEqual([null]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('GATEWAY_TOKEN belongs to GATEWAY_URL');
    // A GATEWAY_URL holding a password (refused wherever it is used) is not printed in this message either.
    const leaky = await sb.run(['whoami', '--url', `http://127.0.0.1:${other.port}`], { env: { ...env, GATEWAY_URL: gw.url.replace('//', '//ops:hunter2@') } });
    expect(leaky.code).toBe(1);
    expect(leaky.stderr).toContain('GATEWAY_TOKEN belongs to GATEWAY_URL');
    expect(leaky.stderr).not.toContain('hunter2');
    // The same gateway however it is spelled, and GATEWAY_TOKEN without GATEWAY_URL, still work.
    expect((await sb.run(['whoami', '--url', `${gw.url}/`], { env })).code).toBe(0);
    expect((await sb.run(['whoami', '--url', gw.url], { env: { GATEWAY_TOKEN: gw.rootToken } })).code).toBe(0);
  } finally {
    other.stop(true);
  }
});

test('a JSON syntax error names no text of the file: an unquoted key or token stays out of the (CI) log', async () => {
  const SECRET = 'azureKey0123456789abcdef0123456789';
  const body = join(sb.dir, 'channel.json');
  writeFileSync(body, `{"name":"c","key": ${SECRET}}`);
  const r = await sb.run(['channel', 'create', '--json-body', body], { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken } });
  expect(r.code).toBe(2);
  expect(r.stderr).toStartWith(`error: --json-body ${body} is not valid JSON: JSON Parse error: Unexpected identifier "…"`);
  expect(r.stderr).not.toContain(SECRET);

  const cfg = join(sb.dir, 'broken-config.json');
  writeFileSync(cfg, `{"url":"${gw.url}","token": ${SECRET}}`, { mode: 0o600 });
  const w = await sb.run(['whoami'], { env: { GW_CONFIG: cfg } });
  expect(w.code).toBe(2);
  expect(w.stderr).toContain('is not valid JSON');
  expect(w.stderr).not.toContain(SECRET);
});

test('a config folder other users may write is warned about: they could replace the file and receive the token', async () => {
  const folder = join(sb.dir, 'shared-cfg');
  mkdirSync(folder);
  const configPath = join(folder, 'config.json');
  writeFileSync(configPath, JSON.stringify({ url: gw.url, token: gw.rootToken }), { mode: 0o600 });
  const run = () => sb.run(['whoami'], { env: { GW_CONFIG: configPath } });
  chmodSync(folder, 0o777);
  const loose = await run();
  expect(loose.code).toBe(0);
  expect(loose.stderr).toBe(`warning: ${folder} is writable by other users, who could replace the config file and receive your token; run: chmod 700 ${folder}\n`);
  // A sticky folder (as /tmp) lets no one replace another user's file; a private one is quiet too.
  for (const mode of [0o1777, 0o700]) {
    chmodSync(folder, mode);
    expect({ mode, stderr: (await run()).stderr }).toEqual({ mode, stderr: '' });
  }
});

test("writing the config takes group and other write from the CLI's own loose folder the user owns (a read only warns); the file still lands", async () => {
  const home = join(sb.dir, 'xdg-loose');
  const folder = join(home, 'ai-gateway');
  mkdirSync(folder, { recursive: true });
  const configPath = join(folder, 'config.json');
  const token = (await gw.services.auth.createAccessToken(1, 'loose-folder')).token;
  writeFileSync(configPath, JSON.stringify({ url: gw.url, token }), { mode: 0o600 });
  chmodSync(folder, 0o777);
  const env = { GW_CONFIG: '', XDG_CONFIG_HOME: home }; // the sandbox names a GW_CONFIG of its own
  const read = await sb.run(['whoami'], { env });
  expect(read.stderr).toContain('is writable by other users');
  expect(lstatSync(folder).mode & 0o7777).toBe(0o777);
  const out = await sb.run(['logout'], { env });
  expect(out.code).toBe(0);
  expect(lstatSync(folder).mode & 0o7777).toBe(0o755);
  expect(JSON.parse(readFileSync(configPath, 'utf8'))).toEqual({ url: gw.url });
});

test('a GW_CONFIG file in a folder shared on purpose: the folder keeps its mode (warned, not changed)', async () => {
  const folder = join(sb.dir, 'shared-project');
  mkdirSync(folder);
  const configPath = join(folder, 'gw.json');
  const token = (await gw.services.auth.createAccessToken(1, 'shared-folder')).token;
  writeFileSync(configPath, JSON.stringify({ url: gw.url, token }), { mode: 0o600 });
  chmodSync(folder, 0o775);
  const out = await sb.run(['logout'], { env: { GW_CONFIG: configPath } });
  expect(out.code).toBe(0);
  expect(out.stderr).toContain('is writable by other users');
  expect(lstatSync(folder).mode & 0o7777).toBe(0o775);
  expect(JSON.parse(readFileSync(configPath, 'utf8'))).toEqual({ url: gw.url });
});

test('a config field of the wrong type is a usage error naming the field (exit 2), not a crash nor `Bearer [object Object]`', async () => {
  const cfg = join(sb.dir, 'typed-config.json');
  const cases: [Record<string, unknown>, string][] = [
    [{ url: 5 }, '"url" must be a string'],
    [{ url: [gw.url] }, '"url" must be a string'],
    [{ url: gw.url, token: { a: 1 } }, '"token" must be a string'],
    [{ url: gw.url, token: gw.rootToken, token_id: '7' }, '"token_id" must be a whole number'],
  ];
  for (const [content, message] of cases) {
    writeFileSync(cfg, JSON.stringify(content), { mode: 0o600 });
    for (const json of [false, true]) {
      const r = await sb.run(['whoami', ...(json ? ['--json'] : [])], { env: { GW_CONFIG: cfg } });
      expect({ content, code: r.code }).toEqual({ content, code: 2 });
      expect(r.stderr).toContain(`config file ${cfg}: ${message}`);
      if (json) expect(JSON.parse(r.stdout).error).toMatchObject({ code: 'usage_error', exit_code: 2 });
    }
  }
});

test('a token with characters no token has is a usage error (exit 2, not echoed), not "cannot reach the gateway"; surrounding whitespace is dropped', async () => {
  const cfg = join(sb.dir, 'token-config.json');
  const bad = `${gw.rootToken.slice(0, 8)}\r\nX-Injected: 1`;
  writeFileSync(cfg, JSON.stringify({ url: gw.url, token: bad }), { mode: 0o600 });
  const runs = [
    await sb.run(['whoami'], { env: { GW_CONFIG: cfg } }),
    await sb.run(['whoami', '--url', gw.url, '--token', bad]),
    await sb.run(['whoami'], { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: `${gw.rootToken}\u00e9` } }),
  ];
  for (const [i, r] of runs.entries()) {
    expect({ i, code: r.code }).toEqual({ i, code: 2 });
    expect(r.stderr).toContain('holds characters no token has');
    expect(r.stderr).not.toContain('X-Injected');
    expect(r.stderr).not.toContain(gw.rootToken.slice(0, 8));
  }
  // A token file saved with CRLF line ends: `--token "$(cat token.txt)"` keeps the `\r`.
  const crlf = await sb.run(['whoami', '--json', '--url', gw.url, '--token', `${gw.rootToken}\r`]);
  expect(crlf.code).toBe(0);
  expect(JSON.parse(crlf.stdout).username).toBe('root');
});

test('an empty GATEWAY_URL (a compose file or CI template passing it on unset) is unset: the config file URL is used', async () => {
  const cfg = join(sb.dir, 'empty-env-config.json');
  writeFileSync(cfg, JSON.stringify({ url: gw.url }), { mode: 0o600 });
  const login = await sb.run(['login', '-u', 'root', '--password-stdin'], { stdin: `${ROOT_PASSWORD}\n`, env: { GW_CONFIG: cfg, GATEWAY_URL: '' } });
  expect(login.stderr).toBe('');
  expect(login.code).toBe(0);
  const w = await sb.run(['whoami', '--json'], { env: { GW_CONFIG: cfg, GATEWAY_URL: '', GATEWAY_TOKEN: '' } });
  expect(w.code).toBe(0);
  expect(JSON.parse(w.stdout).username).toBe('root');
  await sb.run(['logout'], { env: { GW_CONFIG: cfg } });
});

test('a left-behind lock that cannot be moved aside ends the wait at its deadline (exit 2, naming the lock), not in a loop forever', async () => {
  // Moving the lock aside is refused for another user's lock in a sticky folder (EPERM) or in a folder the user may not
  // write (EACCES); as root, a config name whose moved-aside name (`<lock>.<24 hex>.stale`) is too long is the refusal.
  const folder = join(sb.dir, 'long-name');
  mkdirSync(folder, { mode: 0o700 });
  const cfg = join(folder, `${'c'.repeat(236)}.json`);
  writeFileSync(`${cfg}.lock`, 'a killed gw');
  utimesSync(`${cfg}.lock`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
  const started = Date.now();
  const proc = Bun.spawn(['bun', 'run', resolve(import.meta.dir, '../../apps/cli/src/index.ts'), 'login', '--url', gw.url, '-u', 'root', '--password-stdin'], {
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: cfg, NO_COLOR: '1' },
    stdin: new TextEncoder().encode(`${ROOT_PASSWORD}\n`), stdout: 'pipe', stderr: 'pipe',
  });
  const timer = setTimeout(() => proc.kill(), 25_000);
  const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  expect({ code, stderr }).toEqual({ code: 2, stderr: expect.stringContaining(`is locked by another gw process; if none is running, delete ${cfg}.lock`) });
  // The wait's 10 s, not the kill at 25 s.
  expect(Date.now() - started).toBeLessThan(20_000);
}, 30_000);
