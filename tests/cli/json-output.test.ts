/**
 * The `--json` contract for scripts: whatever happens, stdout holds exactly one JSON document (the data, or the
 * error object with its exit code), the exit code is non-zero on failure, and stderr holds only the person's lines
 * (warnings, the one-line `error:`), never part of the document. Through the CLI subprocess against a real gateway
 * (refusals) and stand-ins (what a broken proxy or a dead host answers).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => {
  gw = await startGateway();
  sb = cliSandbox();
});
afterAll(async () => { await gw.stop(); sb.cleanup(); });

/** A config file other users may read: every run that reads it prints a warning on stderr first. */
function looseConfig(url: string, token: string): void {
  mkdirSync(dirname(sb.configPath), { recursive: true });
  writeFileSync(sb.configPath, JSON.stringify({ url, token }));
  chmodSync(sb.configPath, 0o644);
}

/** stdout is one JSON document whose exit_code is the process's; stderr only warning/error lines. */
function expectOneJsonError(args: string[], r: { code: number; stdout: string; stderr: string }, exit: number) {
  expect({ args, code: r.code }).toEqual({ args, code: exit });
  let doc: any;
  try { doc = JSON.parse(r.stdout); } catch { doc = { unparsable: r.stdout }; }
  expect({ args, exit_code: doc?.error?.exit_code }).toEqual({ args, exit_code: exit });
  expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
  for (const line of r.stderr.trimEnd().split('\n').filter(Boolean)) expect({ args, line }).toEqual({ args, line: expect.stringMatching(/^(warning|error): /) });
  return doc.error;
}

describe('--json: one JSON document on stdout, also with a warning on stderr', () => {
  test('success: the data alone on stdout, the warning on stderr', async () => {
    looseConfig(gw.url, gw.rootToken);
    const r = await sb.run(['whoami', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).username).toBeString();
    expect(r.stderr).toStartWith('warning: ');
  });

  test("the gateway's refusals: 400, 401, 403, 404 (exit 1)", async () => {
    const user = await makeUser(gw);
    const cases: [string, string[], number][] = [
      [gw.rootToken, ['log', 'list', '--page-size', '1000', '--json'], 400],
      ['gwm_not-a-real-token-0000000000000000', ['whoami', '--json'], 401],
      [user.token, ['user', 'list', '--json'], 403],
      [gw.rootToken, ['user', 'get', '99999999', '--json'], 404],
    ];
    for (const [token, args, status] of cases) {
      looseConfig(gw.url, token);
      const r = await sb.run(args);
      const error = expectOneJsonError(args, r, 1);
      expect({ args, status: error.status }).toEqual({ args, status });
      expect(r.stderr).toContain('warning: ');
      expect(r.stderr).toContain('\nerror: ');
    }
  });

  test('usage errors (exit 2): a bad flag, a bad value, a missing argument', async () => {
    looseConfig(gw.url, gw.rootToken);
    for (const args of [['whoami', '--bogus', '--json'], ['user', 'get', 'abc', '--json'], ['channel', 'update', '3', '--json']]) {
      expectOneJsonError(args, await sb.run(args), 2);
    }
  });

  test('what is not the gateway: an HTML 502, a 200 that is not JSON, a cut JSON, a refused connection, a silent server', async () => {
    const html = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('<html><body>502 Bad Gateway</body></html>', { status: 502, headers: { 'content-type': 'text/html' } }) });
    const notJson = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('{"success":true,"data":', { headers: { 'content-type': 'application/json' } }) });
    const silent = Bun.serve({
      port: 0, hostname: '127.0.0.1',
      fetch: async (req) => {
        if (new URL(req.url).pathname === '/api/user/self') return Response.json({ success: true, data: { id: 1, role: 100 } });
        await Bun.sleep(5000);
        return new Response('');
      },
    });
    const closed = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') });
    const closedPort = closed.port;
    closed.stop(true);
    try {
      const cases: [number | undefined, string[], number, string][] = [
        [html.port, ['key', 'list', '--json'], 1, 'http_502'],
        [notJson.port, ['whoami', '--json'], 1, 'http_200'],
        [closedPort, ['channel', 'list', '--json'], 3, 'unreachable'],
        [silent.port, ['log', 'export', '--json'], 3, 'unreachable'],
      ];
      for (const [port, args, exit, code] of cases) {
        looseConfig(`http://127.0.0.1:${port}`, 'gwm_token-for-a-stand-in-000000000000');
        const r = await sb.run(args, { env: { GW_EXPORT_IDLE_MS: '800' } });
        const error = expectOneJsonError(args, r, exit);
        expect({ args, code: error.code }).toEqual({ args, code });
      }
    } finally {
      html.stop(true);
      notJson.stop(true);
      silent.stop(true);
    }
  }, 30_000);
});

describe('--json on help and incomplete commands', () => {
  test('a group without its subcommand is a JSON usage error on stdout, exit 2; help and version are JSON documents', async () => {
    for (const args of [['login-session', '--json'], ['--json'], ['2fa', '--json']]) {
      const r = await sb.run(args);
      expect(r.code).toBe(2);
      const doc = JSON.parse(r.stdout);
      expect(doc.error).toMatchObject({ code: 'commander.missingSubcommand', exit_code: 2 });
      expect(doc.error.message).toContain('missing subcommand');
    }
    expect(JSON.parse((await sb.run(['login-session', '--json'])).stdout).error.message).toContain('list, end, end-others');
    for (const args of [['--help', '--json'], ['login-session', '--help', '--json']]) {
      const r = await sb.run(args);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout).help).toStartWith(`Usage: gw ${args[0] === '--help' ? '' : 'login-session '}[options] [command]`);
    }
    const v = await sb.run(['--version', '--json']);
    expect([v.code, JSON.parse(v.stdout)]).toEqual([0, { version: expect.stringMatching(/^\d+\.\d+\.\d+/) }]);
  });
});
