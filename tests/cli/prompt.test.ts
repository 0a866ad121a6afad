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

/**
 * Runs the CLI with `args` on a pseudo-terminal (`script`); `waitFor` reads the screen until a text appears,
 * `type` sends a line as a user would, `exited` ends the run (killed after 10 s).
 */
function onTerminal(args: string[], env: Record<string, string> = {}) {
  const entry = join(resolve(import.meta.dir, '../..'), 'apps/cli/src/index.ts');
  const cmd = ['bun', 'run', entry, ...args].map(shellQuote).join(' ');
  const proc = Bun.spawn(['script', '-qefc', cmd, '/dev/null'], {
    env: { PATH: process.env.PATH ?? '', HOME: sb.dir, GW_CONFIG: sb.configPath, TERM: 'dumb', ...env },
    stdin: 'pipe', stdout: 'pipe', stderr: 'pipe',
  });
  const timer = setTimeout(() => proc.kill(), 10_000);
  const reader = proc.stdout.getReader();
  const term = {
    screen: '',
    async waitFor(text: string) {
      while (!term.screen.includes(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`ended before "${text}"; screen: ${JSON.stringify(term.screen)}`);
        term.screen += new TextDecoder().decode(value);
      }
    },
    async type(line: string) {
      proc.stdin.write(`${line}\r`);
      await proc.stdin.flush();
    },
    async exited() {
      const code = await proc.exited;
      clearTimeout(timer);
      return code;
    },
  };
  return term;
}

test('login on a terminal prompts for the password (echo off) and then for the two-factor code', async () => {
  const u = await makeUser(gw);
  const secret = (await gw.api('POST', '/api/user/2fa/setup', undefined, u.token)).body.data.secret;
  const backup = (await gw.api('POST', '/api/user/2fa/enable', { code: await generate({ secret }), current_password: u.password }, u.token)).body.data.backup_codes[0] as string;

  const term = onTerminal(['login', '--url', gw.url, '-u', u.username]);
  await term.waitFor('Password: ');
  await term.type(u.password);
  await term.waitFor('Two-factor code: ');
  await term.type(backup);
  await term.waitFor('saved to');
  const code = await term.exited();
  const screen = term.screen;

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
  const term = onTerminal(['2fa', 'enable', '--code', code], { GATEWAY_URL: gw.url, GATEWAY_TOKEN: u.token });
  await term.waitFor('Current password: ');
  await term.type(u.password);
  await term.waitFor('shown only now');
  const exit = await term.exited();
  const screen = term.screen;

  expect(exit).toBe(0);
  expect(screen).not.toContain(u.password);
  expect((await gw.api('GET', '/api/user/2fa/status', undefined, u.token)).body.data).toEqual({ enabled: true, backup_codes_remaining: 10 });
}, 30_000);
