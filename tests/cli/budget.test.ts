/** `gw budget` against a real gateway through the CLI subprocess: what it prints matches what the API holds. */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { ON_PG, startGateway, type TestGateway } from '../helpers/gateway';
import { keyedUser } from '../e2e/relay-setup';
import { cliSandbox, type CliSandbox } from './run-cli';

let gw: TestGateway;
let sb: CliSandbox;
beforeAll(async () => { gw = await startGateway(); sb = cliSandbox(); });
afterAll(async () => { await gw.stop(); sb.cleanup(); });

// Budgets are refused (501) in PostgreSQL mode until its settlement charges them (see tests/e2e/budgets.test.ts).
describe.skipIf(ON_PG)('gw budget', () => {
  test('set (user and key), show, list, low-balance, clear, alerts; usage errors exit 2', async () => {
    const u = await keyedUser(gw);
    const root = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: gw.rootToken };
    const mine = { GATEWAY_URL: gw.url, GATEWAY_TOKEN: u.token };
    const run = (args: string[], env = root) => sb.run(args, { env });

    const set = await run(['budget', 'set', '--user', String(u.id), '--period', 'monthly', '--limit', '5000']);
    expect(set.code).toBe(0);
    expect(set.stdout).toMatch(/^Budget \d+: monthly 5000 for user \d+; 0 spent in \d{4}-\d{2}\.\n$/);
    expect((await run(['budget', 'set', '--key', String(u.keyId), '--period', 'daily', '--limit', '700'], mine)).code).toBe(0);
    expect((await run(['budget', 'set', '--user', String(u.id), '--period', 'daily', '--limit', '1'], mine)).code).not.toBe(0);

    const shown = JSON.parse((await run(['budget', 'show', '--json'], mine)).stdout);
    expect(shown.budgets.map((b: any) => [b.scope, b.period, b.limit])).toEqual([['user', 'monthly', 5000], ['key', 'daily', 700]]);
    expect((await run(['budget', 'show', '--user-id', String(u.id)])).stdout).toMatch(/\bkey\s+\d+\s+\d+\s+daily\s+\d{4}-\d{2}-\d{2}\s+700\s+0\s+0\s+700\b/);
    const listed = JSON.parse((await run(['budget', 'list', '--scope', 'key', '--subject-id', String(u.keyId), '--json'])).stdout);
    expect(listed).toHaveLength(1);

    expect((await run(['budget', 'low-balance', '250'], mine)).stdout).toBe(`Low-balance alert of user ${u.id}: 250.\n`);
    expect((await gw.api('GET', '/api/budget/self', undefined, u.token)).body.data.low_balance_threshold).toBe(250);
    expect((await run(['budget', 'clear', String(listed[0].id)], mine)).stdout).toBe(`Cleared budget ${listed[0].id}.\n`);
    expect((await gw.api('GET', `/api/budget/?subject_id=${u.keyId}&scope=key`)).body.data).toEqual([]);
    expect((await run(['budget', 'alerts'])).code).toBe(0);

    expect((await run(['budget', 'set', '--period', 'daily', '--limit', '5'])).code).toBe(2);
    expect((await run(['budget', 'set', '--user', '1', '--period', 'weekly', '--limit', '5'])).code).toBe(2);
  });
});
