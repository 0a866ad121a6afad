/**
 * The interactive path on a real terminal: `script` gives the CLI a pseudo-terminal, and the test types
 * into it only after each prompt appears. The password must never be echoed back.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { generate } from 'otplib';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

test('login on a terminal prompts for the password (echo off) and then for the two-factor code', async () => {
  const u = await makeUser(gw);
  const secret = (await gw.api('POST', '/api/user/2fa/setup', undefined, u.token)).body.data.secret;
  const backup = (await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret }), current_password: u.password }, u.token)).body.data.backup_codes[0] as string;

  const entry = join(resolve(import.meta.dir, '../..'), 'apps/cli/src/index.ts');
  const cmd = ['bun', 'run', entry, 'login', '--url', gw.url, '-u', u.username].map(shellQuote).join(' ');
  const proc = Bun.spawn(['script', '-qefc', cmd, '/dev/null'], {
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath, TERM: 'dumb' },
    stdin: 'pipe', stdout: 'pipe', stderr: 'pipe',
  });
  const timer = setTimeout(() => proc.kill(), 10_000);
  let screen = '';
  const reader = proc.stdout.getReader();
  const waitFor = async (text: string) => {
    while (!screen.includes(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`ended before "${text}"; screen: ${JSON.stringify(screen)}`);
      screen += new TextDecoder().decode(value);
    }
  };
  await waitFor('Password: ');
  proc.stdin.write(`${u.password}\r`);
  await proc.stdin.flush();
  await waitFor('Two-factor code: ');
  proc.stdin.write(`${backup}\r`);
  await proc.stdin.flush();
  await waitFor('saved to');
  const code = await proc.exited;
  clearTimeout(timer);

  expect(code).toBe(0);
  expect(screen).not.toContain(u.password);
  expect(screen).toContain(backup); // the code prompt echoes, as authenticator codes are not secret once used
  const cfg = JSON.parse(readFileSync(sb.configPath, 'utf8'));
  expect((await gw.api('GET', '/api/user/self', undefined, cfg.token)).body.data.username).toBe(u.username);
}, 30_000);

test('2fa enable on a terminal asks for the current password with echo off', async () => {
  const u = await makeUser(gw);
  const secret = (await gw.api('POST', '/api/user/2fa/setup', undefined, u.token)).body.data.secret as string;
  const code = await generate({ secret });
  const entry = join(resolve(import.meta.dir, '../..'), 'apps/cli/src/index.ts');
  const cmd = ['bun', 'run', entry, '2fa', 'enable', '--code', code].map(shellQuote).join(' ');
  const proc = Bun.spawn(['script', '-qefc', cmd, '/dev/null'], {
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath, TERM: 'dumb', GATEWAY_URL: gw.url, GATEWAY_TOKEN: u.token },
    stdin: 'pipe', stdout: 'pipe', stderr: 'pipe',
  });
  const timer = setTimeout(() => proc.kill(), 10_000);
  let screen = '';
  const reader = proc.stdout.getReader();
  const waitFor = async (text: string) => {
    while (!screen.includes(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`ended before "${text}"; screen: ${JSON.stringify(screen)}`);
      screen += new TextDecoder().decode(value);
    }
  };
  await waitFor('Current password: ');
  proc.stdin.write(`${u.password}\r`);
  await proc.stdin.flush();
  await waitFor('shown only now');
  const exit = await proc.exited;
  clearTimeout(timer);

  expect(exit).toBe(0);
  expect(screen).not.toContain(u.password);
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data).toEqual({ enabled: true, backup_codes_remaining: 10 });
}, 30_000);
