/**
 * Errors in the CLI's own terms, through the CLI subprocess against a real gateway: API fields named by
 * the flag that set them, allowed values, retry-after, exit codes (1 refused, 2 usage, 3 unreachable),
 * `--json` errors, and plain users' lists defaulting to their own records.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => {
  gw = await startGateway({ LOGIN_MAX_FAILURES: '2' });
  sb = cliSandbox();
});
afterAll(async () => { await gw.stop(); sb.cleanup(); });

const as = (token: string) => (args: string[], stdin?: string) => sb.run(args, { env: { GATEWAY_URL: gw.url, GATEWAY_TOKEN: token }, stdin });
const root = (args: string[], stdin?: string) => as(gw.rootToken)(args, stdin);

describe('server refusals name flags, not API fields', () => {
  test('a debit beyond the balance points at --allow-negative', async () => {
    const u = await makeUser(gw);
    const r = await root(['ledger', 'adjust', '--user-id', String(u.id), '--amount', '-5', '--note', 'x']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('error: --amount: Balance 0 cannot cover a debit of 5; send --allow-negative to go below zero (insufficient_balance)\n');
    expect((await root(['ledger', 'adjust', '--user-id', String(u.id), '--amount', '-5', '--note', 'x', '--allow-negative'])).code).toBe(0);
  });

  test('a query field refused by the server is named by its flag, with the allowed values', async () => {
    const big = await root(['log', 'list', '--page-size', '1000']);
    expect(big.code).toBe(1);
    expect(big.stderr).toBe('error: --page-size: Expected integer to be less or equal to 100 (allowed: 1 to 100) (out_of_range)\n');
    // `--status` sets `status`; `--from` sets `start_timestamp`: both come back as the flag.
    const status = await root(['log', 'list', '--status', '42']);
    expect(status.code).toBe(1);
    expect(status.stderr).toStartWith('error: --status: ');
    const from = await root(['log', 'list', '--from', '1969-01-01']);
    expect(from.code).toBe(1);
    expect(from.stderr).toStartWith('error: --from: ');
    expect(from.stderr).not.toContain('start_timestamp');
  });

  test('values the CLI knows are checked locally (2) and named', async () => {
    const r = await root(['ledger', 'list', '--kind', 'bogus']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Allowed choices are topup, charge, refund, adjust');
  });

  test('a locked account shows how long to wait', async () => {
    const u = await makeUser(gw);
    const login = () => sb.run(['login', '--url', gw.url, '-u', u.username, '--password-stdin'], { stdin: 'wrong-password-1\n' });
    expect((await login()).code).toBe(1);
    expect((await login()).code).toBe(1);
    const locked = await login();
    expect(locked.code).toBe(1);
    expect(locked.stderr).toMatch(/^error: Account temporarily locked after repeated failed logins \(retry after \d+ s\) \(account_locked\)\n$/);
  });

  test('topup reinstate reaches the root-only route: an unknown order is the gateway\'s 404', async () => {
    const r = await root(['topup', 'reinstate', 'tp_not_an_order', '--dispute', 'dp_1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('(order_not_found)');
  });

  test('no payment provider configured is the gateway\'s answer (1), not a usage error', async () => {
    const r = await root(['topup', 'create', '--amount', '1000']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('no payment provider is configured');
  });
});

describe('usage errors are one line each, the pointer to --help included', () => {
  test('a bad value, a missing argument, an unknown command or option: exit 2, one line on stderr', async () => {
    for (const args of [['user', 'get', 'abc'], ['user', 'get'], ['chanel', 'list'], ['user', 'list', '--bogus'], ['user', 'get', '1', '2']]) {
      const r = await root(args);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: '' });
      expect(r.stderr).toMatch(/^error: [^\n]+ \(add --help for usage\)\n$/);
    }
  });
});

describe('--json errors: one object on stdout, the error line for a person on stderr', () => {
  test('a server refusal carries the server\'s error object, the flag and exit_code 1', async () => {
    const r = await root(['log', 'list', '--page-size', '1000', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toStartWith('error: --page-size: ');
    const server = (await gw.api('GET', '/api/log/?page_size=1000')).body.error;
    const { error } = JSON.parse(r.stdout);
    expect(error).toMatchObject({ ...server, status: 400, flag: '--page-size', exit_code: 1 });
    expect(error.cli_message).toStartWith('--page-size: ');
  });

  test('usage errors (exit 2) and an unreachable gateway (exit 3) are JSON too', async () => {
    const usage = await root(['whoami', '--bogus', '--json']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toBe("error: unknown option '--bogus' (add --help for usage)\n");
    expect(JSON.parse(usage.stdout)).toEqual({ error: { code: 'commander.unknownOption', message: "unknown option '--bogus'", cli_message: "unknown option '--bogus'", exit_code: 2 } });
    const local = await root(['channel', 'update', '3', '--json']);
    expect(JSON.parse(local.stdout).error).toMatchObject({ code: 'usage_error', exit_code: 2 });
    const down = await sb.run(['whoami', '--json', '--url', 'http://127.0.0.1:9']);
    expect(down.code).toBe(3);
    expect(JSON.parse(down.stdout).error).toMatchObject({ code: 'unreachable', exit_code: 3 });
  });

  test('not logged in: exit 1 with the gateway\'s code', async () => {
    const r = await sb.run(['whoami', '--json', '--url', gw.url]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).error).toMatchObject({ status: 401, exit_code: 1, cli_message: expect.stringContaining(`not logged in to ${gw.url}`) });
  });
});

describe('a plain user\'s lists default to their own records', () => {
  test('log, ledger and topup list answer with /self data; admin-only filters explain themselves', async () => {
    const u = await makeUser(gw);
    const other = await makeUser(gw);
    await gw.api('POST', '/api/ledger/adjust', { user_id: u.id, amount: 700, note: 'mine' });
    await gw.api('POST', '/api/ledger/adjust', { user_id: other.id, amount: 900, note: 'not mine' });
    const gwc = as(u.token);

    const ledger = await gwc(['ledger', 'list', '--json']);
    expect(ledger.code).toBe(0);
    const page = JSON.parse(ledger.stdout);
    expect(page).toEqual((await gw.api('GET', '/api/ledger/self', undefined, u.token)).body.data);
    expect(page.items.map((e: any) => e.user_id)).toEqual([u.id]);
    expect((await gwc(['log', 'list'])).code).toBe(0);
    expect((await gwc(['topup', 'list'])).stdout).toBe('(none)\n');

    const filtered = await gwc(['ledger', 'list', '--user-id', String(other.id)]);
    expect(filtered.code).toBe(1);
    expect(filtered.stderr).toBe('error: --user-id needs the admin role; without it you see your own ledger entries (insufficient_role)\n');
    const mixed = await root(['log', 'list', '--self', '--channel-id', '3']);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toContain('--channel-id cannot be combined with --self');

    // An admin still sees everyone's by default, and only their own with --self.
    const all = JSON.parse((await root(['ledger', 'list', '--json'])).stdout);
    expect(all.items.map((e: any) => e.user_id)).toEqual(expect.arrayContaining([u.id, other.id]));
    const mine = JSON.parse((await root(['ledger', 'list', '--self', '--json'])).stdout);
    expect(mine.items.every((e: any) => e.user_id === 1)).toBe(true);
  });
});
