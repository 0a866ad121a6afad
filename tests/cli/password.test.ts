/**
 * `gw password` as a real subprocess: it changes the password and reports exactly what the server
 * ended (login sessions, other access tokens); the token the CLI itself uses keeps working.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const login = (username: string, password: string) => fetch(`${gw.url}/api/user/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });

test('password --stdin prints the sessions ended and tokens revoked, as counted by the server', async () => {
  const u = await makeUser(gw);
  expect((await sb.run(['login', '--url', gw.url, '-u', u.username, '--password-stdin'], { stdin: `${u.password}\n` })).code).toBe(0);
  const cliToken = JSON.parse(readFileSync(sb.configPath, 'utf8')).token as string;
  // Two browser sessions and, besides the CLI's token and makeUser's, one more token elsewhere.
  for (let i = 0; i < 2; i++) expect((await login(u.username, u.password)).status).toBe(200);
  const elsewhere = (await gw.services.auth.createAccessToken(u.id, 'elsewhere')).token;

  const r = await sb.run(['password', '--stdin'], { stdin: `${u.password}\nnew-cli-password-1\n` });
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toContain('Ended 2 login session(s) and revoked 2 other access token(s)');
  expect(r.stdout).toContain('the token this CLI uses stays valid');

  for (const t of [u.token, elsewhere]) expect((await gw.api('GET', '/api/user/self', undefined, t)).status).toBe(401);
  expect((await gw.api('GET', '/api/user/self', undefined, cliToken)).status).toBe(200);
  const who = await sb.run(['whoami', '--json']);
  expect(who.code).toBe(0);
  expect(JSON.parse(who.stdout).username).toBe(u.username);

  // --json prints the server's exact counts.
  const again = await sb.run(['password', '--stdin', '--json'], { stdin: 'new-cli-password-1\nnew-cli-password-2\n' });
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout)).toEqual({ sessions_ended: 0, tokens_revoked: 0 });
}, 30_000);
