/**
 * What `gw login` leaves in its config file. A URL given with credentials (`https://user:pass@host`) must never
 * put them in the file; and logins racing on one config file (two terminals, a script run twice) each revoke the
 * token they replace, so no token is left live that no config holds (it could only be revoked from another login).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { existsSync, readFileSync } from 'node:fs';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
const sandboxes: CliSandbox[] = [];
beforeAll(async () => { gw = await startGateway(); });
afterAll(async () => { await gw.stop(); for (const s of sandboxes) s.cleanup(); });
const sandbox = () => { const s = cliSandbox(); sandboxes.push(s); return s; };

test('a login URL with user:password@ is refused with a clear message and nothing is stored', async () => {
  const user = await makeUser(gw);
  const sb = sandbox();
  const withCreds = gw.url.replace('://', `://${user.username}:url-secret-pw@`);
  const r = await sb.run(['login', '--url', withCreds, '-u', user.username, '--password-stdin'], { stdin: `${user.password}\n` });
  expect(r.code).toBe(2);
  expect(r.stderr).toContain('must not contain credentials');
  expect(r.stderr).not.toContain('url-secret-pw');
  expect(existsSync(sb.configPath) ? readFileSync(sb.configPath, 'utf8') : '').not.toContain('url-secret-pw');
  // Through GATEWAY_URL as well.
  const env = await sb.run(['login', '-u', user.username, '--password-stdin'], { stdin: `${user.password}\n`, env: { GATEWAY_URL: withCreds } });
  expect(env.code).toBe(2);
  expect(existsSync(sb.configPath) ? readFileSync(sb.configPath, 'utf8') : '').not.toContain('url-secret-pw');
}, 20_000);

test('concurrent logins with one config file leave exactly one live login token: the one the file holds', async () => {
  const user = await makeUser(gw);
  const sb = sandbox();
  const login = (i: number) => sb.run(['login', '--url', gw.url, '-u', user.username, '--password-stdin', '--token-name', `race-${i}`], { stdin: `${user.password}\n` });
  expect((await login(0)).code).toBe(0);
  const runs = await Promise.all([1, 2, 3, 4].map(login));
  expect(runs.map((r) => [r.code, r.stderr])).toEqual([1, 2, 3, 4].map(() => [0, '']));
  const cfg = JSON.parse(readFileSync(sb.configPath, 'utf8'));
  const live = await gw.db.all(`select id from access_tokens where user_id = ? and revoked_at is null and name like 'race-%'`, user.id) as { id: number }[];
  expect(live.map((t) => t.id)).toEqual([cfg.token_id]);
  expect((await gw.api('GET', '/api/user/self', undefined, cfg.token)).status).toBe(200);
}, 30_000);
