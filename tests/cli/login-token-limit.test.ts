/**
 * A user holds at most 50 live access tokens and every `gw login` mints one. A login that replaces its config's
 * token must still work at the limit, and a login from a fresh config at the limit must say how to get out (the
 * CLI has no token yet, so `gw access-token revoke` is out of reach) and offer the way: --revoke-idle-days.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
const sandboxes: CliSandbox[] = [];
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); for (const s of sandboxes) s.cleanup(); });

const sandbox = () => { const s = cliSandbox(); sandboxes.push(s); return s; };
const liveTokens = async (userId: number) => (await gw.db.get(
  'select count(*) as n from access_tokens where user_id = ? and revoked_at is null', userId)).n as number;

test('at the 50-token limit: a re-login replaces its token, a fresh one is told the way out, --revoke-idle-days takes it', async () => {
  const user = await makeUser(gw); // holds one token ("test")
  const login = (sb: CliSandbox, extra: string[] = []) =>
    sb.run(['login', '--url', gw.url, '-u', user.username, '--password-stdin', ...extra], { stdin: `${user.password}\n` });

  const a = sandbox();
  expect((await login(a)).code).toBe(0);
  const first = JSON.parse(readFileSync(a.configPath, 'utf8'));
  // 48 more: 20 old logins from configs long gone, 28 script tokens of the same age; 50 live in all.
  const DAY = 86_400;
  for (let i = 0; i < 48; i++) await gw.services.auth.createAccessToken(user.id, i < 20 ? `gw-cli@old-host 2026-01-01T00:00Z ${i}` : `script-${i}`);
  await gw.db.all(`update access_tokens set created_at = created_at - ${10 * DAY} where user_id = ? and (name like 'gw-cli@old-host%' or name like 'script-%')`, user.id);
  expect(await liveTokens(user.id)).toBe(50);

  // The same config logs in again: its old token makes the room.
  const again = await login(a);
  expect({ code: again.code, stderr: again.stderr }).toEqual({ code: 0, stderr: '' });
  const second = JSON.parse(readFileSync(a.configPath, 'utf8'));
  expect(second.token_id).not.toBe(first.token_id);
  expect((await gw.api('GET', '/api/user/self', undefined, first.token)).status).toBe(401);
  expect((await gw.api('GET', '/api/user/self', undefined, second.token)).status).toBe(200);
  expect(await liveTokens(user.id)).toBe(50);

  // A fresh config: refused (exit 1), one JSON error object, and the way out named.
  const b = sandbox();
  const refused = await login(b, ['--json']);
  expect(refused.code).toBe(1);
  const err = JSON.parse(refused.stdout).error;
  expect(err.code).toBe('too_many_access_tokens');
  expect(err.exit_code).toBe(1);
  expect(err.cli_message).toContain('(21 of them made by `gw login`)');
  expect(err.cli_message).toContain('--revoke-idle-days');
  expect(await liveTokens(user.id)).toBe(50);

  // --revoke-idle-days 7 revokes the 20 old login tokens only: not the scripts' tokens, not a's recent login.
  const pruned = await login(b, ['--revoke-idle-days', '7']);
  expect(pruned.code).toBe(0);
  expect(pruned.stderr).toStartWith('Revoked 20 access tokens made by `gw login` and unused for 7 days: ');
  expect(await liveTokens(user.id)).toBe(31);
  expect((await gw.api('GET', '/api/user/self', undefined, second.token)).status).toBe(200);
  expect((await gw.api('GET', '/api/user/self', undefined, user.token)).status).toBe(200);
  expect(await gw.db.get("select count(*) as n from access_tokens where user_id = ? and name like 'script-%' and revoked_at is null", user.id)).toEqual({ n: 28 });
}, 60_000);

test('at the limit, a config holding another user\'s token keeps it: the refused login revokes nothing', async () => {
  const x = await makeUser(gw);
  const y = await makeUser(gw);
  const login = (sb: CliSandbox, u: typeof x) => sb.run(['login', '--url', gw.url, '-u', u.username, '--password-stdin', '--json'], { stdin: `${u.password}\n` });
  const a = sandbox();
  expect((await login(a, x)).code).toBe(0);
  const held = JSON.parse(readFileSync(a.configPath, 'utf8'));
  for (let i = 0; i < 49; i++) await gw.services.auth.createAccessToken(y.id, `script-${i}`);
  expect(await liveTokens(y.id)).toBe(50);
  // y logs in with the config holding x's token: y is at the limit, and revoking x's token makes no room for y.
  const refused = await login(a, y);
  expect(refused.code).toBe(1);
  expect(JSON.parse(refused.stdout).error.code).toBe('too_many_access_tokens');
  expect((await gw.api('GET', '/api/user/self', undefined, held.token)).status).toBe(200);
  expect(JSON.parse(readFileSync(a.configPath, 'utf8')).token).toBe(held.token);
}, 60_000);

/**
 * A loopback HTTP proxy to the gateway that holds each batch revoke until `n` have arrived, then lets them through
 * one after another: every login has listed the idle tokens before any is revoked, as when CI jobs log in at once.
 */
function revokeBarrier(n: number) {
  const held: (() => void)[] = [];
  let chain = Promise.resolve();
  const server = Bun.serve({
    hostname: '127.0.0.1', port: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const forward = async () => {
        const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer();
        const res = await fetch(gw.url + url.pathname + url.search, { method: req.method, headers: req.headers, body, redirect: 'manual' });
        return new Response(await res.arrayBuffer(), { status: res.status, headers: res.headers });
      };
      if (req.method !== 'POST' || url.pathname !== '/api/user/access_token/revoke') return forward();
      const arrived = new Promise<void>((r) => held.push(r));
      if (held.length === n) for (const go of held) go();
      await Promise.race([arrived, Bun.sleep(8_000)]);
      const turn = chain.then(forward);
      chain = turn.then(() => undefined, () => undefined);
      return turn;
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) };
}

test('two CI jobs logging in at once from fresh configs, both with --revoke-idle-days over the same idle tokens, both log in', async () => {
  const user = await makeUser(gw);
  for (let i = 0; i < 6; i++) await gw.services.auth.createAccessToken(user.id, `gw-cli@old-host 2026-01-01T00:00Z ${i}`);
  await gw.db.all(`update access_tokens set created_at = created_at - ${10 * 86_400} where user_id = ? and name like 'gw-cli@old-host%'`, user.id);
  const proxy = revokeBarrier(2);
  try {
    const jobs = [sandbox(), sandbox()];
    const runs = await Promise.all(jobs.map((sb) =>
      sb.run(['login', '--url', proxy.url, '-u', user.username, '--password-stdin', '--revoke-idle-days', '7'], { stdin: `${user.password}\n` })));
    expect(runs.map((r) => ({ code: r.code, stdout: r.stdout.includes('Logged in'), stderrError: r.stderr.includes('rror') })))
      .toEqual([{ code: 0, stdout: true, stderrError: false }, { code: 0, stdout: true, stderrError: false }]);
    // Each says how many it revoked itself: six in all, not six each.
    const counted = runs.map((r) => Number(/^Revoked (\d+) /.exec(r.stderr)?.[1] ?? 0));
    expect(counted[0]! + counted[1]!).toBe(6);
    expect(runs.map((r) => r.stderr).join('')).toContain('already ended');
    expect(await gw.db.get("select count(*) as n from access_tokens where user_id = ? and name like 'gw-cli@old-host%' and revoked_at is null", user.id)).toEqual({ n: 0 });
    for (const sb of jobs) {
      const cfg = JSON.parse(readFileSync(sb.configPath, 'utf8'));
      expect((await gw.api('GET', '/api/user/self', undefined, cfg.token)).status).toBe(200);
    }
  } finally {
    proxy.stop();
  }
}, 60_000);
